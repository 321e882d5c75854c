package functions

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// setupPooledSandbox is setupSandbox on a root server, where network namespaces
// are pooled (exec_sandbox_netpool.go).
func setupPooledSandbox(t *testing.T) *execTestBundle {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("pooled network namespaces need a root server")
		}
		t.Skip("pooled network namespaces need a root server")
	}
	b := setupSandbox(t)
	require.NotNil(t, b.exec.sandbox.pool)
	return b
}

// nsScript prints the handler's network namespace (its inode), then runs body.
func nsScript(body string) string {
	return "cat >/dev/null\necho \"ns=$(readlink /proc/self/ns/net)\"\n" + body
}

// netnsOf returns the namespace a handler printed (nsScript).
func netnsOf(t *testing.T, out string) string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if ns, ok := strings.CutPrefix(line, "ns="); ok {
			return ns
		}
	}
	t.Fatalf("no ns= line in %q", out)
	return ""
}

// TestSandboxNetnsReuseLeavesNothing: a handler that leaves a listener on its
// loopback behind (a process that left its group with setsid) and exits: the
// next attempt gets the same namespace from the pool (within 5 tries of the
// pair), and nothing of the first one listens in it any more (the sandbox's PID namespace, the listener
// with it, was torn down before the namespace went back to the pool).
func TestSandboxNetnsReuseLeavesNothing(t *testing.T) {
	t.Parallel()
	b := setupPooledSandbox(t)
	for _, network := range []struct {
		name string
		none bool
	}{{"pasta", false}, {"none", true}} {
		t.Run(network.name, func(t *testing.T) {
			b.script(t, "leave-"+network.name, nsScript(`setsid python3 -c '
import socket, time
s = socket.socket(); s.bind(("127.0.0.1", 47001)); s.listen(1); time.sleep(60)' </dev/null >/dev/null 2>&1 &
for i in $(seq 100); do python3 -c 'import socket; socket.create_connection(("127.0.0.1", 47001), timeout=1).close()' 2>/dev/null && break; sleep 0.05; done
echo listening`))
			b.script(t, "probe-"+network.name, nsScript(`python3 -c '
import socket
try:
    socket.create_connection(("127.0.0.1", 47001), timeout=1).close(); print("left:yes")
except OSError:
    print("left:no")'`))
			run := func(program string) string {
				inv := b.invocation("./" + program)
				inv.Spec.NoNetwork = network.none
				sink := &testSink{}
				require.NoError(t, b.exec.Invoke(context.Background(), inv, sink), sink.LogText())
				return sink.Out()
			}
			// A namespace whose pasta ended, or whose attempt did not exit on its
			// own, is not reused (a loaded CI machine saw it once): the pair is
			// tried again, up to 5 times, until the probe gets the leaver's.
			for try := 1; ; try++ {
				first := run("leave-" + network.name)
				require.Contains(t, first, "listening")
				second := run("probe-" + network.name)
				if netnsOf(t, first) == netnsOf(t, second) {
					require.Contains(t, second, "left:no")
					return
				}
				require.Less(t, try, 5, "the namespace was never reused: %s / %s", first, second)
				t.Logf("try %d: the probe got another namespace (%s / %s)", try, netnsOf(t, first), netnsOf(t, second))
			}
		})
	}
}

// TestSandboxNetnsNotShared: attempts running at the same time never share a
// namespace, nor do attempts of two workflows, and one whose handler was killed (a timeout) does not give its
// namespace back.
func TestSandboxNetnsNotShared(t *testing.T) {
	t.Parallel()
	b := setupPooledSandbox(t)
	b.script(t, "hold", nsScript("sleep 0.5"))
	const n = 4
	outs := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sink := &testSink{}
			require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./hold"), sink), sink.LogText())
			outs[i] = sink.Out()
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, out := range outs {
		ns := netnsOf(t, out)
		require.False(t, seen[ns], "two attempts at once in namespace %s", ns)
		seen[ns] = true
	}

	// Another workflow's attempt never gets a namespace a first one used: what a
	// handler can see of the one before it (TIME_WAIT entries) stays within its
	// workflow.
	other := b.invocation("./hold")
	other.Envelope.Workflow = "another-team"
	sink0 := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), other, sink0), sink0.LogText())
	require.False(t, seen[netnsOf(t, sink0.Out())], "another workflow's attempt got a namespace of doc-pipeline")

	// A handler killed at its timeout: its namespace is thrown away.
	b.script(t, "stuck", nsScript("sleep 60"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	sink := &testSink{}
	require.Error(t, b.exec.Invoke(ctx, b.invocation("./stuck"), sink))
	killed := netnsOf(t, sink.Out())
	for range n + 1 {
		sink := &testSink{}
		require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./hold"), sink), sink.LogText())
		require.NotEqual(t, killed, netnsOf(t, sink.Out()), "the killed attempt's namespace came back")
	}
}
