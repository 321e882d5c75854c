package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// cairnCmd runs the cairn binary bin with args against the database at dbURL
// and returns its output.
func cairnCmd(t *testing.T, bin, dbURL string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CAIRN_DATABASE_URL=" + dbURL}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "cairn %s: %s", strings.Join(args, " "), out)
	return string(out)
}

// TestRollingUpgrade: a rolling upgrade from the previous release (the commit
// migrations/previous-release names, built by testenv.PreviousCairnBinary).
// Two servers of the previous release run on its schema; `cairn migrate plan`
// of the new binary lists the pending migrations with their phase and locks, and
// `cairn migrate up --phase expand` applies them under the old servers; two new
// servers join, and `cairn servers` shows both versions. Then a server is killed
// every 2 to 4 s and replaced by a new one (the previous release refuses a
// schema ahead of its own at start: this release is the first that starts on
// the next one's expand phase), while runs are started through random servers.
// Every run succeeds within 60 s of the chaos' end (none stuck or lost), with
// exactly one successful attempt per step (none duplicated), and attempts are
// interrupted only on killed servers.
func TestRollingUpgrade(t *testing.T) {
	t.Parallel()
	const runs = 16
	chaos := 12 * time.Second
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 0))

	old := testenv.PreviousCairnBinary(t)
	pg := testenv.PG(t)
	dbURL := testenv.ClusterEmptyDatabaseURL(t, pg)
	cairnCmd(t, old, dbURL, "migrate", "up")

	st := newStack(t, stackOptions{dbURL: dbURL, pgbouncer: bounceNever})
	oldOpts := serverOptions{binary: old, leaseTTL: 3 * time.Second}
	newOpts := serverOptions{leaseTTL: 3 * time.Second}
	cs := &chaosStack{t: t, st: st}
	cs.live = []*server{st.start(oldOpts), st.start(oldOpts)}
	cs.live[0].api().deploy(failoverWorkflow)

	plan := cairnCmd(t, cairnBinary(t), dbURL, "migrate", "plan")
	t.Logf("cairn migrate plan:\n%s", plan)
	require.Contains(t, plan, "LOCKS")
	require.Contains(t, plan, "00089_namespaces.sql")
	require.Contains(t, plan, "ACCESS EXCLUSIVE on workflows")
	t.Logf("cairn migrate up --phase expand: %s", cairnCmd(t, cairnBinary(t), dbURL, "migrate", "up", "--phase", "expand"))
	cs.live = append(cs.live, st.start(newOpts), st.start(newOpts))

	// The registry shows both releases (a beat every 5 s).
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		cmd := exec.Command(cairnBinary(t), "servers")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "CAIRN_DATABASE_URL=" + dbURL}
		out, err := cmd.CombinedOutput()
		require.NoError(c, err, "%s", out)
		assert.Contains(c, string(out), "devel ×2") // the previous release's build (testenv.PreviousCairnBinary)
		assert.Contains(c, string(out), testenv.TestBuildVersion+" ×2")
		assert.Contains(c, string(out), "4 live")
	}, 30*time.Second, 500*time.Millisecond, "cairn servers lists the old and new servers")

	start := time.Now()
	end := start.Add(chaos)
	nextKill := start.Add(2 * time.Second)
	ids := make([]string, runs)
	for i := 0; i < runs || time.Now().Before(end); {
		now := time.Now()
		switch {
		case now.After(nextKill) && now.Before(end):
			cs.killOne(r, newOpts)
			nextKill = time.Now().Add(2*time.Second + time.Duration(r.Int64N(int64(2*time.Second))))
		case i < runs && now.After(start.Add(time.Duration(i)*chaos/time.Duration(runs))):
			key := fmt.Sprintf("upgrade-%d-%d", seed, i)
			var run *client.Run
			err := cs.call(cs.pick(r), "start run", func(ctx context.Context, c *apiClient) (err error) {
				run, err = c.cl.CreateRun(ctx, "failover", client.StartRunBody{Input: map[string]int{"n": i}}, key)
				return err
			})
			if err == nil {
				ids[i] = run.Id
				i++
				continue
			}
			time.Sleep(50 * time.Millisecond)
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	chaosEnd := time.Now()
	t.Logf("%d runs started, %d servers killed", runs, len(cs.killed))

	cs.waitSucceeded(r, ids, chaosEnd.Add(60*time.Second))

	api := cs.pick(r).api()
	for i, id := range ids {
		api.requireEachStepOnce(t, id, cs.isKilled)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(api.output(id, "d")), "run %s", id)
	}
	for _, a := range cs.errors {
		require.NotEqual(t, http.StatusInternalServerError, a.status, "%s from %s: %s", a.path, a.server, a.body)
	}
	cs.wg.Wait()
}
