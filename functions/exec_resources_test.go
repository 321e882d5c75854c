package functions

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExecResourcesMemory: a handler that allocates past resources.memory ends
// with code resource_exhausted (terminal), unisolated and in the sandbox; one
// that stays under it succeeds, and an unrelated failure under a limit keeps its
// code. The step's env reaches the handler.
func TestExecResourcesMemory(t *testing.T) {
	t.Parallel()
	for _, sandboxed := range []bool{false, true} {
		var b *execTestBundle
		if sandboxed {
			b = setupSandbox(t)
		} else {
			b = setupExec(t, nil)
		}
		b.script(t, "bin/alloc", `read -r envelope
echo "allocating $MIB MiB" >&2
exec perl -e '$x = "a" x ($ENV{MIB} * 1024 * 1024); print "{\"ok\": true}"'`)
		b.script(t, "bin/fail", "echo nope >&2\nexit 4")
		run := func(argv string, mib string, res *Resources) (*testSink, error) {
			inv := b.invocation(argv)
			inv.Spec.Env = []string{"MIB=" + mib}
			inv.Spec.Resources = res
			sink := &testSink{}
			return sink, b.exec.Invoke(context.Background(), inv, sink)
		}
		limit := &Resources{MemoryBytes: 96 << 20, Pids: 4096, CPU: 0.5}

		sink, err := run("./bin/alloc", "512", limit)
		var fe *Error
		require.True(t, errors.As(err, &fe), "sandboxed=%v: %v", sandboxed, err)
		require.Equal(t, CodeResourceExhausted, fe.Code, fe.Message)
		require.False(t, fe.Retryable)
		require.Contains(t, fe.Message, "100663296 bytes")
		require.Contains(t, sink.log.String(), "allocating 512 MiB")
		require.Contains(t, sink.log.String(), "resources.cpu is not enforced")

		sink, err = run("./bin/alloc", "8", limit)
		require.NoError(t, err, "sandboxed=%v: %s", sandboxed, sink.log.String())
		require.JSONEq(t, `{"ok": true}`, sink.Out())

		_, err = run("./bin/alloc", "128", nil)
		require.NoError(t, err, "no limit: 128 MiB is fine")

		_, err = run("./bin/fail", "0", limit)
		require.True(t, errors.As(err, &fe))
		require.Equal(t, CodeExitStatus, fe.Code)
	}
}
