package e2e

import (
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// pgbouncerWarning is what a server logs when its LISTEN does not hear the
// notifications sent through the pool (runtime/listen.go).
const pgbouncerWarning = "pool_mode=transaction"

// TestPgBouncerWithoutListenURL: two servers reach PostgreSQL only through a
// PgBouncer in transaction mode (CAIRN_DATABASE_POOL_MODE=transaction, and no
// CAIRN_DATABASE_LISTEN_URL, so their LISTEN goes through it too and hears
// nothing). Each logs a warning that names transaction pooling, and runs started
// through both at once, which use the pool's connections concurrently (no
// statement may rely on the server connection of the one before), all succeed.
// The CAIRN_E2E_PGBOUNCER leg (scripts/test.sh) runs the suite's core through a
// PgBouncer with a direct LISTEN URL.
func TestPgBouncerWithoutListenURL(t *testing.T) {
	t.Parallel()
	st := newStack(t, stackOptions{pgbouncer: bounceNoListenURL})
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{})}
	servers[0].api().deploy(map[string]string{"cairn.yaml": `name: pooled
steps:
  - key: first
    builtin: noop
  - key: second
    needs: [first]
    builtin: echo
  - key: third
    needs: [first]
    builtin: echo
  - key: last
    needs: [second, third]
    builtin: echo
`})
	const runs = 40
	ids := make([]string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ids[i] = servers[i%2].api().startRun("pooled", 0, map[string]int{"i": i})
		}()
	}
	wg.Wait()
	for i, id := range ids {
		run := servers[(i+1)%2].api().waitRun(id, time.Minute)
		require.Equal(t, client.RunStatusSucceeded, run.Status, "run %s: %s", id, jsonOf(run.Error))
	}
	for _, s := range servers {
		// The probe gives up after three notifications, two seconds each.
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			log, err := os.ReadFile(s.logPath)
			require.NoError(c, err)
			assert.Contains(c, string(log), pgbouncerWarning, "the warning about transaction pooling in %s's log", s.name)
		}, 30*time.Second, 100*time.Millisecond)
		line := grepLine(s.logPath, pgbouncerWarning)
		require.Contains(t, line, "CAIRN_DATABASE_LISTEN_URL", "the warning says what to set")
		t.Logf("%s: %s", s.name, line)
	}
}

// grepLine is the first line of the file at path that contains s, or "".
func grepLine(path, s string) string {
	b, _ := os.ReadFile(path)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			return line
		}
	}
	return ""
}
