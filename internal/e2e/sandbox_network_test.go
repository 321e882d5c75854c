package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// probeHandler connects to each address of its input's "targets" (name →
// host:port) and outputs name → "ok" or the error; "metrics" is fetched with
// HTTP GET.
const probeHandler = `#!/usr/bin/env python3
import json, socket, sys, urllib.request
env = json.loads(sys.stdin.readline())
out = {}
for name, addr in env["input"]["targets"].items():
    host, port = addr.rsplit(":", 1)
    try:
        if name == "metrics":
            urllib.request.urlopen("http://%s:%s/metrics" % (host, port), timeout=3).read()
        else:
            socket.create_connection((host, int(port)), timeout=3).close()
        out[name] = "ok"
    except Exception as e:
        out[name] = "fail: %s" % e
print(json.dumps(out))
`

// TestExecHandlersHaveNoRouteToTheHost: from inside an exec
// handler of a real `cairn serve`, root or not, the catalog's PostgreSQL, the
// API's port and its /metrics on the host cannot be reached, while a port of the
// host the step allows can, and so can another machine (a network namespace of
// the test, through a veth pair).
func TestExecHandlersHaveNoRouteToTheHost(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	eachServerUser(t, func(t *testing.T, uid int) {
		ns := testenv.NewNetns(t)
		outside := ns.Listen(t, ns.PeerAddr+":0").Addr().String()
		allowed, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { allowed.Close() })
		_, allowedPort, _ := net.SplitHostPort(allowed.Addr().String())

		st := newStack(t, stackOptions{})
		db, err := url.Parse(st.dbURL)
		require.NoError(t, err)
		s := st.start(serverOptions{uid: uid, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}})
		api := s.api()
		// The server's own /metrics answers on the host: only the handler is kept away.
		resp, err := http.Get(s.url + "/metrics")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		apiAddr := strings.TrimPrefix(s.url, "http://")

		api.deploy(map[string]string{
			"cairn.yaml": fmt.Sprintf(`name: netprobe
steps:
  - key: probe
    exec: ["./bin/probe"]
    network: {allow: ["localhost:%s"]}
`, allowedPort),
			"bin/probe": probeHandler,
		})
		id := api.startRun("netprobe", 0, map[string]any{"targets": map[string]string{
			"catalog": "127.0.0.1:" + db.Port(),
			"api":     apiAddr,
			"metrics": apiAddr,
			"allowed": "127.0.0.1:" + allowedPort,
			"outside": outside,
		}})
		run := api.waitRun(id, 60*time.Second)
		require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
		var got map[string]string
		require.NoError(t, json.Unmarshal(api.output(id, "probe"), &got))
		for _, name := range []string{"catalog", "api", "metrics"} {
			require.True(t, strings.HasPrefix(got[name], "fail"), "%s reachable from the handler: %v", name, got)
		}
		require.Equal(t, "ok", got["allowed"], "%v", got)
		require.Equal(t, "ok", got["outside"], "%v", got)
	})
}

// TestKilledServerTakesItsHandlers: a `cairn serve` killed with
// SIGKILL while sandboxed handlers run, each with children of its own (one
// in a session of its own), leaves no process of theirs behind, nor any pasta
// serving their network, root or not.
func TestKilledServerTakesItsHandlers(t *testing.T) {
	t.Parallel()
	requireBwrap(t)
	eachServerUser(t, func(t *testing.T, uid int) {
		st := newStack(t, stackOptions{})
		s := st.start(serverOptions{uid: uid, env: []string{"CAIRN_EXEC_ISOLATION=bwrap"}})
		api := s.api()
		// A number no other process of the machine has on its command line.
		marker := strconv.Itoa(400000 + os.Getpid()%10000*10 + uid%7)
		api.deploy(map[string]string{
			"cairn.yaml": `name: orphans
steps:
  - {key: a, exec: ["./bin/run"]}
  - {key: b, exec: ["./bin/run"], network: none}
`,
			"bin/run": "#!/bin/sh\ncat >/dev/null\nsleep " + marker + " &\n(setsid sleep " + marker + " &)\necho started >&2\nexec sleep " + marker + "\n",
		})
		id := api.startRun("orphans", 0, nil)
		ours := func() []string {
			var found []string
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				b, err := os.ReadFile(p)
				if err != nil {
					continue
				}
				cmd := strings.ReplaceAll(string(b), "\x00", " ")
				if strings.Contains(cmd, "sleep "+marker) || strings.Contains(cmd, st.dir) && !strings.Contains(cmd, "cairn serve") {
					if pid := strings.Split(p, "/")[2]; !processGone(atoi(pid)) {
						found = append(found, pid+": "+cmd)
					}
				}
			}
			return found
		}
		// Each handler and its two children run (beside bwrap, pasta and setpriv).
		require.Eventually(t, func() bool { return strings.Count(strings.Join(ours(), "\n"), "sleep "+marker) >= 6 }, 60*time.Second, 50*time.Millisecond,
			"the handlers of run %s did not start", id)
		s.kill()
		// The kernel ends them as their parents die, one level after the other.
		if !assert.Eventually(t, func() bool { return len(ours()) == 0 }, 10*time.Second, 20*time.Millisecond) {
			t.Fatalf("processes outlived their server: %v", ours())
		}
	})
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// eachServerUser runs test as parallel subtests for a root server and one
// running as nobody (a non-root server; skipped when the tests are not root).
func eachServerUser(t *testing.T, test func(t *testing.T, uid int)) {
	for _, tc := range []struct {
		name string
		uid  int
	}{{"root", 0}, {"nobody", 65534}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if tc.uid != 0 && os.Geteuid() != 0 {
				t.Skip("dropping to another user needs root")
			}
			test(t, tc.uid)
		})
	}
}
