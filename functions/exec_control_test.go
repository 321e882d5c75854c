package functions

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldWarning is the start of what the invoker logs when a process outside the
// handler's group keeps a pipe open.
const heldWarning = "exec pipes held open by a process outside the group"

// slowSink is a testSink whose checkpoints, output and log take their time, as
// when the blob store retries or the database is busy.
type slowSink struct {
	testSink
	checkpointDelay time.Duration
	writeDelay      time.Duration
}

func (s *slowSink) Checkpoint(ctx context.Context, value json.RawMessage) error {
	// Sleeping is the simulated work, not a wait for something.
	time.Sleep(s.checkpointDelay)
	return s.testSink.Checkpoint(ctx, value)
}

func (s *slowSink) Output() io.Writer { return slowWriter{w: s.testSink.Output(), delay: s.writeDelay} }

func (s *slowSink) Log() io.Writer { return slowWriter{w: s.testSink.Log(), delay: s.writeDelay} }

type slowWriter struct {
	w     io.Writer
	delay time.Duration
}

func (w slowWriter) Write(p []byte) (int, error) {
	time.Sleep(w.delay)
	return w.w.Write(p)
}

// logBuffer is an io.Writer for a slog handler, safe for concurrent use.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// setupExecLogged is setupExec with the invoker's own log kept in a buffer.
func setupExecLogged(t *testing.T, cfg *ExecConfig) (*execTestBundle, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return setupExec(t, cfg), logs
}

// waitResultWithin waits for an asynchronous Invoke, failing the test if it
// takes longer than within.
func waitResultWithin(t *testing.T, done <-chan error, within time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(within):
		require.FailNow(t, "Invoke did not return")
		return nil
	}
}

// numbered returns "1", "2", … "n".
func numbered(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i + 1)
	}
	return out
}

// checkpointPad fills the checkpoints of checkpointsThenTerminal: 3,000 of them
// are then more than the pipe and the control reader's buffer hold together.
const checkpointPad = "0123456789012345678901234567890123456789"

// checkpointsThenTerminal writes n checkpoint lines to fd 3, then a
// non-retryable error, then exits 1. A handler blocks on the full pipe until the
// rest fits: when it exits, most lines are still to be read.
func checkpointsThenTerminal(n int) string {
	return fmt.Sprintf(`seq 1 %d | sed 's/.*/{"checkpoint":{"n":&,"pad":"%s"}}/' >&3
echo '{"error":{"message":"no","retryable":false}}' >&3
exit 1`, n, checkpointPad)
}

// wantCheckpoints is what checkpointsThenTerminal(n) checkpoints, in order.
func wantCheckpoints(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf(`{"n":%d,"pad":"%s"}`, i+1, checkpointPad)
	}
	return out
}

// requireTerminal checks that err is the handler's non-retryable "no".
func requireTerminal(t *testing.T, err error) {
	t.Helper()
	var fnErr *Error
	require.ErrorAs(t, err, &fnErr)
	require.False(t, fnErr.Retryable, "the handler said not to retry: %v", fnErr)
	require.Equal(t, CodeFunctionError, fnErr.Code)
	require.Equal(t, "no", fnErr.Message)
}

// TestExecSlowControlSinkKeepsEveryMessage: a handler writes 3,000 checkpoints and
// a non-retryable error, then exits, long before a slow sink has stored them.
// Every line is applied, in order, and the error is not lost: the pipes had no
// writer left, so nothing was cut.
func TestExecSlowControlSinkKeepsEveryMessage(t *testing.T) {
	t.Parallel()

	const n = 3000
	b, logs := setupExecLogged(t, &ExecConfig{KillGrace: 200 * time.Millisecond})
	b.script(t, "many", checkpointsThenTerminal(n))
	sink := &slowSink{checkpointDelay: time.Millisecond}
	err := waitResultWithin(t, invokeAsync(context.Background(), b.exec, b.invocation("many"), sink), 60*time.Second)

	requireTerminal(t, err)
	require.Equal(t, wantCheckpoints(n), sink.Checkpoints())
	require.NotContains(t, logs.String(), heldWarning)
	require.NotContains(t, sink.LogText(), "cairn:")
}

// TestExecSlowOutputSinkKeepsEverything: stdout and stderr of a handler that
// exited are read to their end however slow the sink is.
func TestExecSlowOutputSinkKeepsEverything(t *testing.T) {
	t.Parallel()

	const lines = 20000 // about 110 KB on each stream: more than a pipe holds
	b, logs := setupExecLogged(t, &ExecConfig{KillGrace: 100 * time.Millisecond})
	b.script(t, "chatty", fmt.Sprintf("seq 1 %d &\nseq 1 %d >&2\nwait", lines, lines))
	sink := &slowSink{writeDelay: 250 * time.Millisecond}
	err := waitResultWithin(t, invokeAsync(context.Background(), b.exec, b.invocation("chatty"), sink), 60*time.Second)
	require.NoError(t, err)

	want := strings.Join(numbered(lines), "\n") + "\n"
	require.Equal(t, len(want), len(sink.Out()), "stdout size")
	require.True(t, want == sink.Out(), "stdout differs")
	require.Equal(t, len(want), len(sink.LogText()), "stderr size")
	require.True(t, want == sink.LogText(), "stderr differs")
	require.NotContains(t, logs.String(), heldWarning)
}

// TestExecEscapedChildCutsOnlyItsPipes: a process that left the group holds
// pipes open. Those are cut with the warning; what the handler wrote before it
// exited is still read, however slow the sink, on the pipes the escaped process
// holds and on the others.
func TestExecEscapedChildCutsOnlyItsPipes(t *testing.T) {
	t.Parallel()

	const n = 3000
	tests := []struct {
		name      string
		escape    string // starts the escaped process
		wantPipes string // the pipes the warning names
	}{
		{name: "holds stdout and stderr", escape: "setsid sleep 60 3>&- &", wantPipes: "pipes=stdout,stderr"},
		{name: "holds every pipe", escape: "setsid sleep 60 &", wantPipes: "pipes=stdout,stderr,control"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b, logs := setupExecLogged(t, &ExecConfig{KillGrace: 100 * time.Millisecond})
			prog := fmt.Sprintf("escape%d", i)
			b.script(t, prog, tt.escape+"\n"+`echo "{\"progress\":{\"shell\":$$,\"child\":$!}}" >&3`+
				"\necho done\n"+checkpointsThenTerminal(n))
			sink := &slowSink{checkpointDelay: time.Millisecond}
			err := waitResultWithin(t, invokeAsync(context.Background(), b.exec, b.invocation(prog), sink), 60*time.Second)

			require.Len(t, sink.ProgressReports(), 1)
			_, child := pids(t, sink.ProgressReports()[0])
			require.NoError(t, syscall.Kill(child, syscall.SIGKILL))
			requireTerminal(t, err)
			require.Equal(t, wantCheckpoints(n), sink.Checkpoints())
			require.Equal(t, "done\n", sink.Out())
			require.Contains(t, logs.String(), heldWarning)
			require.Contains(t, logs.String(), tt.wantPipes)
			// Waiting for the escaped child to be gone.
			require.Eventually(t, func() bool { return processGone(child) }, time.Second, 5*time.Millisecond)
		})
	}
}

// TestExecSlowSinkCancel: the attempt's ctx still ends an attempt whose sink is
// slow to take what the handler left in its pipes.
func TestExecSlowSinkCancel(t *testing.T) {
	t.Parallel()

	b, _ := setupExecLogged(t, &ExecConfig{KillGrace: 100 * time.Millisecond})
	b.script(t, "many", checkpointsThenTerminal(3000))
	// Slow enough that draining would take a minute.
	sink := &slowSink{checkpointDelay: 20 * time.Millisecond}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := invokeAsync(ctx, b.exec, b.invocation("many"), sink)

	// Waiting for the sink to be busy with the checkpoints.
	require.Eventually(t, func() bool { return len(sink.Checkpoints()) >= 10 }, 10*time.Second, 5*time.Millisecond)
	cause := fmt.Errorf("run canceled by user")
	canceled := time.Now()
	cancel(cause)
	err := waitResultWithin(t, done, 10*time.Second)
	require.ErrorIs(t, err, cause)
	require.Less(t, time.Since(canceled), 2*time.Second, "Invoke returns soon after the cancel")
}

// refusingSink is a testSink that refuses every checkpoint_file as too large, as
// the dispatcher's sink does past CAIRN_MAX_CHECKPOINT_SIZE.
type refusingSink struct {
	testSink
}

func (s *refusingSink) CheckpointFile(_ context.Context, f *os.File) error {
	return CheckpointTooLarge(f.Name(), 1024)
}

// TestExecCheckpointFileRefusedFailsAttempt: a checkpoint_file the sink
// refuses with an *Error (over the size limit) ends the attempt at once with that
// error, terminal, and the handler's log says which message was refused; the
// handler's later lines and its exit do not matter.
func TestExecCheckpointFileRefusedFailsAttempt(t *testing.T) {
	t.Parallel()
	b := setupExec(t, nil)
	b.script(t, "big", `
head -c 2048 /dev/zero > "$TMPDIR/cp"
echo "{\"checkpoint_file\":\"$TMPDIR/cp\"}" >&3
sleep 600
echo '{}'`)
	sink := &refusingSink{}
	err := b.exec.Invoke(context.Background(), b.invocation("big"), sink)
	var fe *Error
	require.True(t, errors.As(err, &fe), "%v", err)
	require.Equal(t, CodeCheckpointTooLarge, fe.Code)
	require.False(t, fe.Retryable)
	require.Equal(t, "checkpoint_file cp is larger than the limit of 1024 bytes (CAIRN_MAX_CHECKPOINT_SIZE): nothing was stored", fe.Message)
	require.Contains(t, sink.LogText(), "cairn: control message 1 (checkpoint_file) refused: checkpoint_file cp is larger")
	require.Empty(t, sink.Out())
}
