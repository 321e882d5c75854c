package functions

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// execTestBundle is a bundle directory with scripts, and the invoker under test.
type execTestBundle struct {
	dir  string
	exec *Exec
}

func setupExec(t *testing.T, cfg *ExecConfig) *execTestBundle {
	t.Helper()
	if cfg == nil {
		cfg = &ExecConfig{}
	}
	if cfg.TempDir == "" {
		cfg.TempDir = t.TempDir()
	}
	return &execTestBundle{dir: t.TempDir(), exec: NewExec(cfg)}
}

// script writes an executable /bin/sh script at path (relative to the bundle).
func (b *execTestBundle) script(t *testing.T, path, body string) {
	t.Helper()
	full := filepath.Join(b.dir, path)
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte("#!/bin/sh\n"+body+"\n"), 0o755))
}

func (b *execTestBundle) invocation(argv ...string) *Invocation {
	return &Invocation{
		Envelope: Envelope{
			RunID:    "run-123",
			Workflow: "doc-pipeline",
			Version:  3,
			Step:     "fetch",
			Attempt:  2,
			Input:    json.RawMessage(`{"url":"https://example.com"}`),
			Params:   json.RawMessage(`null`),
		},
		Spec:      Spec{Exec: argv},
		BundleDir: b.dir,
	}
}

// invokeAsync runs Invoke in a goroutine; the channel yields its result.
func invokeAsync(ctx context.Context, inv Invoker, in *Invocation, sink Sink) <-chan error {
	done := make(chan error, 1)
	go func() { done <- inv.Invoke(ctx, in, sink) }()
	return done
}

// waitResult waits for an asynchronous Invoke, failing the test if it hangs.
func waitResult(t *testing.T, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		require.FailNow(t, "Invoke did not return")
		return nil
	}
}

// processGone reports whether pid no longer runs: it does not exist, or it is a
// zombie nobody reaped yet (in a container, PID 1 may never reap orphans).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	state := stat[i+2]
	return state == 'Z' || state == 'X'
}

// pids decodes a progress report {"shell": N, "child": M}.
func pids(t *testing.T, report string) (shell, child int) {
	t.Helper()
	var p struct{ Shell, Child int }
	require.NoError(t, json.Unmarshal([]byte(report), &p))
	require.Positive(t, p.Shell)
	require.Positive(t, p.Child)
	return p.Shell, p.Child
}

func TestExecStdinAndStdout(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	b.script(t, "bin/cat", "cat")
	inv := b.invocation("./bin/cat")
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink))

	want, err := json.Marshal(inv.Envelope)
	require.NoError(t, err)
	require.Equal(t, string(want)+"\n", sink.Out())
	require.Empty(t, sink.ContentType())

	// The envelope is one complete line, and a relative bundle directory works.
	b.script(t, "bin/read", "set -e; read -r envelope; printf '%s' \"$envelope\"")
	wd, err := os.Getwd()
	require.NoError(t, err)
	relDir, err := filepath.Rel(wd, b.dir)
	require.NoError(t, err)
	inv = b.invocation("bin/read")
	inv.BundleDir = relDir
	sink = &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink))
	require.Equal(t, string(want), sink.Out())
}

func TestExecProgramPaths(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	b.script(t, "bin/ok", "echo ok")
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "data.txt"), []byte("x"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "garbage"), []byte("\x00\x01garbage"), 0o755))
	b.script(t, "badinterp", "")
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "badinterp"), []byte("#!/nonexistent/interpreter\n"), 0o755))
	require.NoError(t, os.Symlink("/bin/sh", filepath.Join(b.dir, "evil")))
	require.NoError(t, os.Symlink("/usr/bin", filepath.Join(b.dir, "evildir")))
	require.NoError(t, os.Symlink("bin/ok", filepath.Join(b.dir, "alias")))

	tests := []struct {
		name    string
		argv    []string
		wantOut string // success when set
		wantMsg string // terminal invalid_spec otherwise
	}{
		{name: "dot slash", argv: []string{"./bin/ok"}, wantOut: "ok\n"},
		{name: "plain relative", argv: []string{"bin/ok"}, wantOut: "ok\n"},
		{name: "uncleaned inside", argv: []string{"bin/../bin/./ok"}, wantOut: "ok\n"},
		{name: "symlink inside", argv: []string{"alias"}, wantOut: "ok\n"},
		{name: "dot dot", argv: []string{"../ok"}, wantMsg: "leaves the bundle"},
		{name: "dot dot after cleaning", argv: []string{"bin/../../ok"}, wantMsg: "leaves the bundle"},
		{name: "absolute", argv: []string{"/bin/sh"}, wantMsg: "not absolute"},
		{name: "symlink out", argv: []string{"evil"}, wantMsg: "leaves the bundle"},
		{name: "symlinked dir out", argv: []string{"evildir/env"}, wantMsg: "leaves the bundle"},
		{name: "missing", argv: []string{"./bin/nope"}, wantMsg: "not found"},
		{name: "missing below a file", argv: []string{"data.txt/x"}, wantMsg: "not found"},
		{name: "bare command name", argv: []string{"sh"}, wantMsg: "not found"},
		{name: "not executable", argv: []string{"data.txt"}, wantMsg: "not executable"},
		{name: "directory", argv: []string{"bin"}, wantMsg: "not a regular file"},
		{name: "not an executable format", argv: []string{"garbage"}, wantMsg: "exec format error"},
		{name: "bad interpreter", argv: []string{"badinterp"}, wantMsg: "no such file"},
		{name: "empty argv", argv: nil, wantMsg: "no program"},
		{name: "empty program", argv: []string{""}, wantMsg: "no program"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			sink := &testSink{}
			err := b.exec.Invoke(context.Background(), b.invocation(tt.argv...), sink)
			if tt.wantOut != "" {
				require.NoError(t, err)
				require.Equal(t, tt.wantOut, sink.Out())
				return
			}
			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.False(t, fnErr.Retryable)
			require.Equal(t, CodeInvalidSpec, fnErr.Code)
			require.Contains(t, fnErr.Message, tt.wantMsg)
		})
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Parallel()

	b := setupExec(t, &ExecConfig{ExtraEnv: []string{"FOO=bar", "LANG=xx_XX.UTF-8", "CAIRN_STEP=forged"}})
	b.script(t, "bin/env", `echo "CWD=$(pwd -P)"; test -d "$HOME" && test -d "$TMPDIR" && echo dirs=ok; exec env`)
	sink := &testSink{}
	inv := b.invocation("bin/env")
	inv.Envelope.Traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink))

	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(sink.Out()), "\n") {
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, line)
		env[k] = v
	}
	realBundle, err := filepath.EvalSymlinks(b.dir)
	require.NoError(t, err)
	require.Equal(t, realBundle, env["CWD"])
	require.Equal(t, "ok", env["dirs"])
	require.Equal(t, "run-123", env["CAIRN_RUN_ID"])
	require.Equal(t, "fetch", env["CAIRN_STEP"])
	require.Equal(t, "2", env["CAIRN_ATTEMPT"])
	require.Equal(t, "doc-pipeline", env["CAIRN_WORKFLOW"])
	require.Equal(t, "3", env["CAIRN_VERSION"])
	require.Equal(t, "3", env["CAIRN_CONTROL_FD"])
	require.Equal(t, inv.Envelope.Traceparent, env["TRACEPARENT"])
	require.Equal(t, "bar", env["FOO"])
	require.Equal(t, "xx_XX.UTF-8", env["LANG"])
	require.NotEmpty(t, env["PATH"])
	require.NotEqual(t, env["HOME"], env["TMPDIR"])

	// Nothing else of the test process's environment leaks in; the shell may add
	// a few variables of its own.
	allowed := map[string]bool{"CWD": true, "dirs": true, "PATH": true, "HOME": true, "LANG": true,
		"TMPDIR": true, "FOO": true, "TRACEPARENT": true, "PWD": true, "OLDPWD": true, "SHLVL": true, "_": true}
	for k := range env {
		require.True(t, allowed[k] || strings.HasPrefix(k, "CAIRN_"), "unexpected variable %s", k)
	}

	// The attempt's private directories are gone.
	for _, dir := range []string{env["HOME"], env["TMPDIR"]} {
		_, err := os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
	}
}

func TestExecLargeOutputIsStreamed(t *testing.T) {
	t.Parallel()

	const size = 50 << 20
	b := setupExec(t, nil)
	b.script(t, "big", fmt.Sprintf("head -c %d /dev/zero", size))
	sink := &testSink{hashOutput: true}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("big"), sink))

	require.EqualValues(t, size, sink.OutSize())
	h := sha256.New()
	_, err := h.Write(make([]byte, size))
	require.NoError(t, err)
	require.Equal(t, hex.EncodeToString(h.Sum(nil)), sink.OutSHA256())
	// Handed over in chunks (of outputReadSize once the output is larger than one
	// small read), never as one buffered whole.
	require.LessOrEqual(t, sink.MaxWrite(), outputReadSize)
}

func TestExecOutputArrivesBeforeExit(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	gate := filepath.Join(t.TempDir(), "gate")
	b.script(t, "slow", fmt.Sprintf(`echo first; while [ ! -e %q ]; do sleep 0.01; done; echo second`, gate))
	sink := &testSink{}
	done := invokeAsync(context.Background(), b.exec, b.invocation("slow"), sink)

	// Waiting for the first line to reach the sink while the script still runs.
	require.Eventually(t, func() bool { return sink.Out() == "first\n" }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, os.WriteFile(gate, nil, 0o644))
	require.NoError(t, waitResult(t, done))
	require.Equal(t, "first\nsecond\n", sink.Out())
}

func TestExecStdinNotRead(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	b.script(t, "ignore", "echo ok")
	b.script(t, "closer", "exec 0<&-; sleep 0.05; echo ok")
	big := `"` + strings.Repeat("x", 1<<20) + `"` // far beyond a pipe's buffer

	for _, prog := range []string{"ignore", "closer"} {
		inv := b.invocation(prog)
		inv.Envelope.Input = json.RawMessage(big)
		sink := &testSink{}
		require.NoError(t, b.exec.Invoke(context.Background(), inv, sink), prog)
		require.Equal(t, "ok\n", sink.Out(), prog)
	}
}

func TestExecControlMessages(t *testing.T) {
	t.Parallel()

	// 200 bytes: room for a path in the attempt's TMPDIR (named after the server's pid
	// and the attempt), not for the 300-byte checkpoint below.
	b := setupExec(t, &ExecConfig{MaxControlLine: 200})
	require.NoError(t, os.MkdirAll(filepath.Join(b.dir, "data"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(b.dir, "data", "cp.json"), []byte("relative"), 0o644))
	b.script(t, "ctl", `
echo '{"checkpoint":{"n":1}}' >&3
printf '%s' 'state-2' > "$TMPDIR/cp"
echo "{\"checkpoint_file\":\"$TMPDIR/cp\"}" >&3
echo '{"checkpoint_file":"data/cp.json"}' >&3
echo '{"checkpoint_file":"/nonexistent/cp"}' >&3
mkfifo "$TMPDIR/fifo"
echo "{\"checkpoint_file\":\"$TMPDIR/fifo\"}" >&3
echo '{"checkpoint_file":"/dev/zero"}' >&3
echo '{"progress":{"pct":50}}' >&3
echo 'not json' >&3
echo '{"what":1}' >&3
echo '{"checkpoint":1,"progress":2}' >&3
echo '' >&3
echo "{\"checkpoint\":\"$(head -c 300 /dev/zero | tr '\0' x)\"}" >&3
echo '{"checkpoint":null}' >&3
echo '{"checkpoint":{"n":2}}' >&3
echo 'to stderr' >&2
printf '%s' '{"progress":"last line without newline"}' >&3
echo done`)
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("ctl"), sink))

	require.Equal(t, "done\n", sink.Out())
	require.Equal(t, []string{`{"n":1}`, `null`, `{"n":2}`}, sink.Checkpoints())
	require.Equal(t, []string{"state-2", "relative"}, sink.CheckpointFiles())
	require.Equal(t, []string{`{"pct":50}`, `"last line without newline"`}, sink.ProgressReports())
	log := sink.LogText()
	require.Contains(t, log, "to stderr\n")
	require.Contains(t, log, "cairn: control message 4 (checkpoint_file) failed")
	require.Contains(t, log, "cairn: control message 5 (checkpoint_file) failed")
	require.Contains(t, log, "fifo is not a regular file")
	require.Contains(t, log, "cairn: control message 6 (checkpoint_file) failed: /dev/zero is outside the handler's TMPDIR, HOME and bundle")
	require.Contains(t, log, "cairn: control message 8 ignored: decode control message")
	require.Contains(t, log, "cairn: control message 9 ignored: control message: want exactly one")
	require.Contains(t, log, "cairn: control message 10 ignored: control message: want exactly one")
	require.Contains(t, log, "cairn: control message 12 longer than 200 bytes: skipped")
}

// TestExecCheckpointFileStaysInside: the server opens a checkpoint_file for the
// handler, so a path must not make it read one of its own files: its environment
// (/proc/self/environ is the server's, seen from the server), its credentials,
// anything outside the handler's TMPDIR, HOME and bundle, however the path gets
// there (absolute, "..", a symbolic link).
func TestExecCheckpointFileStaysInside(t *testing.T) {
	t.Parallel()
	b := setupExec(t, nil)
	secret := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(secret, []byte("CAIRN_ADMIN_TOKEN=secret"), 0o644))
	b.script(t, "steal", `
echo '{"checkpoint_file":"/proc/self/environ"}' >&3
echo '{"checkpoint_file":"`+secret+`"}' >&3
echo "{\"checkpoint_file\":\"$TMPDIR/../../../../../../../..`+secret+`\"}" >&3
echo '{"checkpoint_file":"../../../../../../../../../..`+secret+`"}' >&3
ln -s `+secret+` "$TMPDIR/link"
echo "{\"checkpoint_file\":\"$TMPDIR/link\"}" >&3
ln -s / "$HOME/root"
echo "{\"checkpoint_file\":\"$HOME/root`+secret+`\"}" >&3
printf mine > "$TMPDIR/ok"
echo "{\"checkpoint_file\":\"$TMPDIR/ok\"}" >&3
echo done`)
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("steal"), sink))
	require.Equal(t, []string{"mine"}, sink.CheckpointFiles(), "only the handler's own file is read")
	log := sink.LogText()
	for i := 1; i <= 6; i++ {
		require.Contains(t, log, fmt.Sprintf("cairn: control message %d (checkpoint_file) failed", i))
	}
	require.NotContains(t, log, "secret")
}

func TestExecFailures(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	tests := []struct {
		name          string
		body          string
		wantRetryable bool
		wantCode      string
		wantMsg       []string
		wantLog       string
	}{
		{
			name:     "terminal error message, non-zero exit",
			body:     `echo '{"error":{"message":"bad input","retryable":false}}' >&3; exit 1`,
			wantCode: CodeFunctionError, wantMsg: []string{"bad input"},
		},
		{
			name:     "terminal error message, exit 0",
			body:     `echo '{"error":{"message":"bad input","retryable":false}}' >&3; echo partial`,
			wantCode: CodeFunctionError, wantMsg: []string{"bad input"},
		},
		{
			name:          "retryable error message",
			body:          `echo '{"error":{"message":"try later"}}' >&3; exit 2`,
			wantRetryable: true, wantCode: CodeFunctionError, wantMsg: []string{"try later"},
		},
		{
			name:          "last error message wins",
			body:          `echo '{"error":{"message":"first","retryable":false}}' >&3; echo '{"error":{"message":"second","retryable":true}}' >&3; exit 1`,
			wantRetryable: true, wantCode: CodeFunctionError, wantMsg: []string{"second"},
		},
		{
			name:          "exit status with stderr",
			body:          `echo boom >&2; exit 3`,
			wantRetryable: true, wantCode: CodeExitStatus, wantMsg: []string{"exit status 3", "stderr: boom"}, wantLog: "boom\n",
		},
		{
			name:          "exit status 127 of a missing command",
			body:          `no-such-command-anywhere`,
			wantRetryable: true, wantCode: CodeExitStatus, wantMsg: []string{"exit status 127", "not found"},
		},
		{
			name:          "signal",
			body:          `kill -KILL $$`,
			wantRetryable: true, wantCode: CodeSignal, wantMsg: []string{"killed by signal 9"},
		},
		{
			name:          "stderr tail only",
			body:          `head -c 10000 /dev/zero | tr '\0' a >&2; echo END >&2; exit 1`,
			wantRetryable: true, wantCode: CodeExitStatus, wantMsg: []string{"exit status 1", "…aaa", "aEND"},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			prog := fmt.Sprintf("fail%d", i)
			b.script(t, prog, tt.body)
			sink := &testSink{}
			err := b.exec.Invoke(context.Background(), b.invocation(prog), sink)
			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.Equal(t, tt.wantRetryable, fnErr.Retryable)
			require.Equal(t, tt.wantCode, fnErr.Code)
			for _, m := range tt.wantMsg {
				require.Contains(t, fnErr.Message, m)
			}
			require.Less(t, len(fnErr.Message), stderrTailSize+200)
			if tt.wantLog != "" {
				require.Equal(t, tt.wantLog, sink.LogText())
			}
		})
	}
}

// TestExecStopKillsProcessGroup proves that a handler and its grandchild are gone
// within a second of the attempt being stopped, whatever stops it.
func TestExecStopKillsProcessGroup(t *testing.T) {
	t.Parallel()

	const reportPIDs = `echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3`
	tests := []struct {
		name string
		body string
		// stop ends the attempt; it returns the error Invoke must return.
		stop      func(cancel context.CancelCauseFunc) error
		leaseLost bool
	}{
		{
			name: "cancel",
			body: "sleep 60 &\n" + reportPIDs + "\nwait",
			stop: func(cancel context.CancelCauseFunc) error {
				cancel(nil)
				return context.Canceled
			},
		},
		{
			name: "cancel with cause",
			body: "sleep 60 &\n" + reportPIDs + "\nwait",
			stop: func(cancel context.CancelCauseFunc) error {
				cause := errors.New("run canceled by user")
				cancel(cause)
				return cause
			},
		},
		{
			name: "sigterm ignored: sigkill after grace",
			body: "trap '' TERM\nsleep 60 &\n" + reportPIDs + "\nwhile :; do wait; done",
			stop: func(cancel context.CancelCauseFunc) error {
				cancel(context.DeadlineExceeded)
				return context.DeadlineExceeded
			},
		},
		{
			name: "grandchild holds stdout, shell execs sleep",
			body: "sleep 60 &\n" + reportPIDs + "\nexec sleep 60",
			stop: func(cancel context.CancelCauseFunc) error {
				cancel(nil)
				return context.Canceled
			},
		},
		{
			name:      "lease lost on checkpoint",
			body:      "sleep 60 &\n" + reportPIDs + "\necho '{\"checkpoint\":1}' >&3\nwait",
			leaseLost: true,
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupExec(t, &ExecConfig{KillGrace: 200 * time.Millisecond})
			prog := fmt.Sprintf("stop%d", i)
			b.script(t, prog, tt.body)
			sink := &pidSink{testSink: testSink{}, leaseLost: tt.leaseLost}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			done := invokeAsync(ctx, b.exec, b.invocation(prog), sink)

			// Waiting for the script to report its PIDs (and, for the lease case,
			// to have sent its checkpoint).
			require.Eventually(t, func() bool { return len(sink.ProgressReports()) == 1 }, 5*time.Second, 5*time.Millisecond)
			shell, child := pids(t, sink.ProgressReports()[0])

			want := ErrLeaseLost
			if tt.stop != nil {
				want = tt.stop(cancel)
			}
			// Waiting for both processes to be gone: at most a second.
			require.Eventually(t, func() bool { return processGone(shell) && processGone(child) },
				time.Second, 5*time.Millisecond)
			err := waitResult(t, done)
			require.ErrorIs(t, err, want)
			var fnErr *Error
			require.False(t, errors.As(err, &fnErr), "a stopped attempt is not a handler failure: %v", err)
		})
	}
}

// pidSink is a testSink whose progress calls always succeed, so that a script
// can report its PIDs even when checkpoints lose the lease.
type pidSink struct {
	testSink
	leaseLost bool
}

func (s *pidSink) Checkpoint(ctx context.Context, value json.RawMessage) error {
	if s.leaseLost {
		return fmt.Errorf("store checkpoint: %w", ErrLeaseLost)
	}
	return s.testSink.Checkpoint(ctx, value)
}

func TestExecTimeout(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	b.script(t, "forever", `sleep 60 & echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3; wait`)
	sink := &testSink{}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := b.exec.Invoke(ctx, b.invocation("forever"), sink)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	require.Len(t, sink.ProgressReports(), 1)
	shell, child := pids(t, sink.ProgressReports()[0])
	// Waiting for the orphaned grandchild to be reaped or at least dead.
	require.Eventually(t, func() bool { return processGone(shell) && processGone(child) }, time.Second, 5*time.Millisecond)
}

func TestExecLeftoversAfterExit(t *testing.T) {
	t.Parallel()

	b := setupExec(t, &ExecConfig{KillGrace: 100 * time.Millisecond})
	tests := []struct {
		name string
		body string
		// escaped: the grandchild left the process group, so the invoker cannot
		// kill it; the test does.
		escaped bool
	}{
		{name: "background child holds stdout", body: `sleep 60 & echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3; echo done`},
		{name: "background child with closed stdio", body: `sleep 60 >/dev/null 2>&1 3>&- & echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3; echo done`},
		{name: "escaped child holds stdout", body: `setsid sleep 60 & echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3; echo done`, escaped: true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			prog := fmt.Sprintf("leftover%d", i)
			b.script(t, prog, tt.body)
			sink := &testSink{}
			err := waitResult(t, invokeAsync(context.Background(), b.exec, b.invocation(prog), sink))
			require.NoError(t, err)
			require.Equal(t, "done\n", sink.Out())
			require.Len(t, sink.ProgressReports(), 1)
			_, child := pids(t, sink.ProgressReports()[0])
			if tt.escaped {
				require.NoError(t, syscall.Kill(child, syscall.SIGKILL))
			}
			// Waiting for the left-over child to be gone.
			require.Eventually(t, func() bool { return processGone(child) }, time.Second, 5*time.Millisecond)
		})
	}
}

func TestExecOutputRefused(t *testing.T) {
	t.Parallel()

	plain := errors.New("blob store unavailable")
	tests := []struct {
		name      string
		outputErr error
		check     func(t *testing.T, err error)
	}{
		{name: "lease lost", outputErr: fmt.Errorf("upload: %w", ErrLeaseLost), check: func(t *testing.T, err error) {
			require.ErrorIs(t, err, ErrLeaseLost)
		}},
		{name: "output too large", outputErr: &Error{Message: "output too large", Code: CodeProtocol}, check: func(t *testing.T, err error) {
			var fnErr *Error
			require.ErrorAs(t, err, &fnErr)
			require.Equal(t, "output too large", fnErr.Message)
		}},
		{name: "infrastructure", outputErr: plain, check: func(t *testing.T, err error) {
			require.ErrorIs(t, err, plain)
			var fnErr *Error
			require.False(t, errors.As(err, &fnErr))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setupExec(t, &ExecConfig{KillGrace: 100 * time.Millisecond})
			// Writes forever: only the abort can end it.
			b.script(t, "flood", "exec cat /dev/zero")
			sink := &testSink{outputErr: tt.outputErr}
			tt.check(t, waitResult(t, invokeAsync(context.Background(), b.exec, b.invocation("flood"), sink)))
		})
	}
}

func TestExecContextDoneBeforeStart(t *testing.T) {
	t.Parallel()

	b := setupExec(t, nil)
	marker := filepath.Join(t.TempDir(), "ran")
	b.script(t, "mark", fmt.Sprintf("touch %q", marker))
	cause := errors.New("dispatcher shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	require.ErrorIs(t, b.exec.Invoke(ctx, b.invocation("mark"), &testSink{}), cause)
	_, err := os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist)
}

func TestTailBuffer(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		size   int
		writes []string
		want   string
	}{
		{name: "empty", size: 8, want: ""},
		{name: "fits", size: 8, writes: []string{"ab", "cd"}, want: "abcd"},
		{name: "exactly full", size: 4, writes: []string{"ab", "cd"}, want: "…abcd"},
		{name: "wraps", size: 4, writes: []string{"abc", "def"}, want: "…cdef"},
		{name: "one big write", size: 4, writes: []string{"abcdefgh"}, want: "…efgh"},
		{name: "many small writes", size: 5, writes: []string{"a", "b", "c", "d", "e", "f", "g"}, want: "…cdefg"},
		{name: "cut rune dropped", size: 4, writes: []string{"xé", "abc"}, want: "…abc"},
		{name: "trimmed", size: 16, writes: []string{"  boom\n"}, want: "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			tb := newTailBuffer(tt.size)
			for _, w := range tt.writes {
				n, err := tb.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tt.want, tb.String())
		})
	}
}

func FuzzParseControlMessage(f *testing.F) {
	for _, seed := range []string{
		`{"checkpoint":{"n":1}}`, `{"checkpoint_file":"/tmp/x"}`, `{"progress":50}`,
		`{"error":{"message":"bad","retryable":false}}`, `{"checkpoint":1,"progress":2}`,
		`not json`, `null`, `[]`, `{"error":null}`, `{"checkpoint_file":""}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		m, err := parseControlMessage(line)
		if err != nil {
			require.Nil(t, m)
			return
		}
		set := 0
		for _, present := range []bool{m.Checkpoint != nil, m.CheckpointFile != nil, m.Progress != nil, m.Error != nil} {
			if present {
				set++
			}
		}
		require.Equal(t, 1, set)
		if m.Checkpoint != nil {
			require.True(t, json.Valid(m.Checkpoint))
		}
	})
}
