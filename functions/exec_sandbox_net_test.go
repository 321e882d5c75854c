package functions

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

// probeScript connects to each name=host:port of targets and prints name:ok or
// name:fail (python3: a connect with a timeout).
func probeScript(targets map[string]string) string {
	var list []string
	for name, addr := range targets {
		host, port, _ := net.SplitHostPort(addr)
		list = append(list, fmt.Sprintf("(%q, %q, %s)", name, host, port))
	}
	return `cat >/dev/null
python3 - <<'PY'
import socket
for name, host, port in [` + strings.Join(list, ", ") + `]:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print(name + ":ok")
    except OSError as e:
        print(name + ":fail", e)
PY`
}

// listenHost listens on addr of the host (the test's own namespace).
func listenHost(t *testing.T, addr string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestSandboxNetwork: a handler's network is a namespace of
// its own: the host's loopback (where the catalog and the API listen), the
// host's other addresses and the link-local range (instance metadata) are not
// reachable from it, a port the step allows is, and so is another machine (a
// network namespace of the test's, through a veth pair). /proc/net lists none of
// the host's sockets.
func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	b := setupSandbox(t)
	ns := testenv.NewNetns(t)
	outside := ns.Listen(t, ns.PeerAddr+":0").Addr().String()
	metadata := ns.Listen(t, ns.LinkLocalAddr+":0").Addr().String()
	denied := listenHost(t, "127.0.0.1:0")
	allowed := listenHost(t, "127.0.0.1:0")
	hostAddr := listenHost(t, ns.HostAddr+":0")
	_, allowedPort, _ := net.SplitHostPort(allowed)
	_, deniedPort, _ := net.SplitHostPort(denied)

	b.script(t, "probe", probeScript(map[string]string{
		"loopback": denied, "allowed": allowed, "host-address": hostAddr,
		"outside": outside, "metadata": metadata,
	})+"\ngrep -ci ':'"+fmt.Sprintf("%04X", mustAtoi(t, deniedPort))+" /proc/net/tcp || true")
	inv := b.invocation("./probe")
	inv.Spec.AllowPorts = []int{mustAtoi(t, allowedPort)}
	sink := &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), inv, sink), sink.LogText())
	out := sink.Out()
	for _, want := range []string{"loopback:fail", "allowed:ok", "host-address:fail", "outside:ok", "metadata:fail"} {
		require.Contains(t, out, want, out)
	}
	require.True(t, strings.HasSuffix(out, "\n0\n"), "the host's listener is not in the handler's /proc/net/tcp: %s", out)

	// The same handler without the allow: the port is the host's loopback too.
	sink = &testSink{}
	require.NoError(t, b.exec.Invoke(context.Background(), b.invocation("./probe"), sink), sink.LogText())
	require.Contains(t, sink.Out(), "allowed:fail")
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	_, err := fmt.Sscanf(s, "%d", &n)
	require.NoError(t, err)
	return n
}
