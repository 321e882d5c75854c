package functions

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// requireBwrap skips a test without bubblewrap, or fails it under CI=true (the
// project's scripts install it there).
func requireBwrap(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("bubblewrap (bwrap) is not installed; `make tools` installs it")
		}
		t.Skip("bubblewrap (bwrap) is not installed; `make tools` installs it")
	}
}

func setupSandbox(t *testing.T) *execTestBundle {
	t.Helper()
	requireBwrap(t)
	b := setupExec(t, &ExecConfig{Isolation: IsolationBwrap})
	how, err := b.exec.Isolation()
	require.NoError(t, err)
	require.Contains(t, how, "bubblewrap")
	return b
}

// TestSandboxHidesTheServer: a sandboxed handler sees no process of the server
// (a read of /proc/$PPID/environ), none of its files, and runs as an
// unprivileged uid when the server is root.
func TestSandboxHidesTheServer(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	secretDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(secretDir, "credentials"), []byte("CAIRN_ADMIN_TOKEN=secret"), 0o644))
	b.script(t, "leak", `
cat >/dev/null
echo "uid=$(id -u)"
echo "processes=$(ls /proc | grep -c '^[0-9]')"
tr '\0' '\n' < /proc/$PPID/environ 2>/dev/null | grep CAIRN_ && echo PPID-LEAK
tr '\0' '\n' < /proc/`+strconv.Itoa(os.Getpid())+`/environ 2>/dev/null | grep . >/dev/null && echo SERVER-LEAK
cat `+secretDir+`/credentials 2>/dev/null && echo FILE-LEAK
echo "tmp=$(echo x > "$TMPDIR/f" && cat "$TMPDIR/f")"
echo "home=$(echo y > "$HOME/f" && cat "$HOME/f")"
`)
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./leak"), sink), sink.LogText())
	out := sink.Out()
	require.NotContains(t, out, "LEAK")
	require.NotContains(t, out, "secret")
	require.Contains(t, out, "tmp=x\n")
	require.Contains(t, out, "home=y\n")
	// The sandbox's init, the shell and the commands of the pipeline: nothing else.
	require.Regexp(t, `processes=[1-5]\n`, out)
	if os.Geteuid() == 0 {
		require.Contains(t, out, "uid="+strconv.Itoa(DefaultSandboxUID)+"\n")
	} else {
		require.Contains(t, out, "uid="+strconv.Itoa(DefaultSandboxUID)+"\n", "the server's uid, mapped in a user namespace")
	}
}

// TestSandboxBundleIsReadOnly: a tampering handler cannot change the bundle
// that later attempts run, whatever it tries (root inside included).
func TestSandboxBundleIsReadOnly(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	b.script(t, "bin/victim", `cat >/dev/null; echo original`)
	b.script(t, "bin/tamper", `
cat >/dev/null
chmod u+w . bin bin/victim 2>/dev/null
printf '#!/bin/sh\necho PWNED\n' > bin/victim && echo WRITE-OK
touch dropped 2>/dev/null && echo CREATE-OK
echo done`)
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./bin/tamper"), sink))
	require.Equal(t, "done\n", sink.Out())
	require.Contains(t, sink.LogText(), "Read-only file system")

	victim := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./bin/victim"), victim))
	require.Equal(t, "original\n", victim.Out())
	_, err := os.Stat(filepath.Join(b.dir, "dropped"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// TestSandboxInputs: a handler reads the files of its own $blob inputs, and no
// other file beside them.
func TestSandboxInputs(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	blobs := t.TempDir()
	mine := filepath.Join(blobs, "mine")
	other := filepath.Join(blobs, "other")
	require.NoError(t, os.WriteFile(mine, []byte("my input"), 0o444))
	require.NoError(t, os.WriteFile(other, []byte("someone else's"), 0o444))
	b.script(t, "read", `
cat >/dev/null
cat `+mine+`; echo
cat `+other+` 2>/dev/null && echo OTHER-LEAK
printf cp > "$TMPDIR/cp"
echo "{\"checkpoint_file\":\"$TMPDIR/cp\"}" >&3
`)
	inv := b.invocation("./read")
	inv.Envelope.Deps = map[string]json.RawMessage{"up": blobstore.Ref{Digest: "sha256:" + strings.Repeat("a", 64), Size: 8, Path: mine}.JSON()}
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink), sink.LogText())
	require.Equal(t, "my input\n", sink.Out())
	require.Equal(t, []string{"cp"}, sink.CheckpointFiles())
}

// TestSandboxTimeoutKillsEverything: a sandboxed handler and its children are
// gone when Invoke returns after ctx ended.
func TestSandboxTimeoutKillsEverything(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	marker := "cairn-sandbox-marker-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	b.script(t, "hang", `
cat >/dev/null
sh -c 'sleep 300; :' `+marker+` &
setsid sh -c 'sleep 300; :' `+marker+` &
sh -c 'sleep 300; :' `+marker)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := invokeAsync(ctx, b.exec, b.invocation("./hang"), &testSink{})
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.True(c, processWithName(c, marker)) }, 10*time.Second, 20*time.Millisecond,
		"waiting for the handler's processes to start")
	cancel(errors.New("step timed out"))
	require.EqualError(t, <-done, "step timed out")
	// Wait for the kernel to finish tearing the PID namespace down.
	require.EventuallyWithT(t, func(c *assert.CollectT) { assert.False(c, processWithName(c, marker)) }, 5*time.Second, 20*time.Millisecond,
		"processes of the handler outlived the attempt")
}

// processWithName reports whether a process of this machine runs under name.
func processWithName(t require.TestingT, name string) bool {
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(b), name) {
			return true
		}
	}
	return false
}

// TestIsolationUnavailableRefuses: with IsolationBwrap asked for and no working
// bubblewrap, no handler runs, and the failure says why and how to choose.
func TestIsolationUnavailableRefuses(t *testing.T) {
	t.Parallel()
	b := setupExec(t, nil)
	b.exec.unavailable = errors.New("bubblewrap (bwrap) is not installed")
	b.script(t, "never", `touch `+filepath.Join(b.dir, "ran"))
	err := b.exec.Invoke(context.Background(), b.invocation("./never"), &testSink{})
	var fe *Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, CodeIsolationUnavailable, fe.Code)
	require.True(t, fe.Retryable, "another server may run it: the retry policy bounds it")
	require.Contains(t, fe.Message, "bubblewrap")
	_, statErr := os.Stat(filepath.Join(b.dir, "ran"))
	require.ErrorIs(t, statErr, os.ErrNotExist)
	_, ierr := b.exec.Isolation()
	require.Error(t, ierr)
}

// TestSandboxReportsSignals: a sandboxed handler killed by a signal is reported as
// such, as without a sandbox (bubblewrap turns it into exit status 128+n).
func TestSandboxReportsSignals(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	b.script(t, "die", `cat >/dev/null; kill -9 $$`)
	err := b.exec.Invoke(context.Background(), b.invocation("./die"), &testSink{})
	var fe *Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, CodeSignal, fe.Code, fe.Message)
	require.Contains(t, fe.Message, "killed by signal 9")
	require.True(t, fe.Retryable)
}

// TestSandboxNoNetwork: a step with network: none sees no network interface but
// its own, unconfigured loopback; other steps see their own namespace's (its
// loopback and pasta's), never the host's. A server that does not isolate
// handlers refuses such a step rather than run it networked.
func TestSandboxNoNetwork(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	b.script(t, "ifaces", `cat >/dev/null; grep : /proc/net/dev | cut -d: -f1 | tr -d ' ' | sort | tr '\n' ' '`)

	inv := b.invocation("./ifaces")
	inv.Spec.NoNetwork = true
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink), sink.LogText())
	require.Equal(t, "lo ", sink.Out())

	own := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./ifaces"), own), own.LogText())
	require.Equal(t, 2, strings.Count(own.Out(), " "), "the namespace's loopback and pasta's interface: %s", own.Out())
	require.Contains(t, own.Out(), "lo ")

	plain := setupExec(t, nil)
	plain.script(t, "ifaces", `echo ran`)
	inv = plain.invocation("./ifaces")
	inv.Spec.NoNetwork = true
	err := plain.exec.Invoke(context.Background(), inv, &testSink{})
	var fe *Error
	require.ErrorAs(t, err, &fe)
	require.Equal(t, CodeIsolationUnavailable, fe.Code)
}
