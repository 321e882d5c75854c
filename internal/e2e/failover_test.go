package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// failoverWorkflow is four steps, three of them handlers that take 400 ms, so
// that leases are held while the primary goes away.
var failoverWorkflow = map[string]string{
	"cairn.yaml": `name: failover
steps:
  - {key: a, exec: ["./bin/work"]}
  - {key: b, needs: [a], exec: ["./bin/work"]}
  - {key: c, needs: [a], builtin: sleep, with: {duration: 300ms}}
  - {key: d, needs: [b, c], exec: ["./bin/work"]}
`,
	"bin/work": `#!/usr/bin/env python3
import json, sys, time
envelope = json.loads(sys.stdin.readline())
time.sleep(0.4)
print(json.dumps({"n": envelope["input"]["n"]}))
`,
}

// multiHostURL is dbURL (a postgres:// URL of a role's database) as a lib/pq DSN
// naming both servers, primary first, that connects only to the one that takes
// writes (target_session_attrs=read-write): how the servers follow a failover
// without anything repointed.
func multiHostURL(t *testing.T, dbURL string, ports ...int) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	password, _ := u.User.Password()
	hosts, portList := "", ""
	for i, p := range ports {
		if i > 0 {
			hosts, portList = hosts+",", portList+","
		}
		hosts += "127.0.0.1"
		portList += fmt.Sprint(p)
	}
	return fmt.Sprintf("host=%s port=%s user=%s password=%s dbname=%s sslmode=disable connect_timeout=2 target_session_attrs=read-write",
		hosts, portList, u.User.Username(), password, u.Path[1:])
}

// TestFailover: a primary with a synchronous streaming replica (pg_basebackup
// -R), three servers on a multi-host URL with target_session_attrs=read-write,
// runs started throughout. Halfway, the primary is killed and the replica
// promoted. Every server is ready again within two lease TTLs of the promotion;
// every run acknowledged succeeds (none lost), with exactly one successful
// attempt per step (none duplicated) and no attempt interrupted (no server died,
// so an interrupted attempt would be a live lease swept).
func TestFailover(t *testing.T) {
	t.Parallel()
	// The lease TTL is 5 s (production's default is 30 s), and the sweep's grace
	// after an outage two TTLs. On a 2-core CI machine loaded by the rest of the
	// suite, a TTL of 2 s had a server's readiness probe of its file store stall
	// (2 s) past "two TTLs" (4 s), and one of 3 s had a live dispatcher, starved,
	// renew its liveness later than the 6 s grace after the promotion, which then
	// swept one of its leases.
	const (
		runs     = 24
		leaseTTL = 5 * time.Second
	)
	primary := testenv.PGPrimary(t)
	dbURL := testenv.ClusterDatabaseURL(t, primary)
	standby := testenv.PGStandby(t, primary)
	ctx, cancel := withTimeout(time.Minute)
	defer cancel()
	// A commit is acknowledged once the replica has it: a failover loses none.
	require.NoError(t, primary.SetSetting(ctx, "synchronous_standby_names", "*"))
	cancel()

	st := newStack(t, stackOptions{dbURL: multiHostURL(t, dbURL, primary.Port(), standby.Port()), pgbouncer: bounceNever})
	opts := serverOptions{leaseTTL: leaseTTL}
	servers := []*server{st.start(opts), st.start(opts), st.start(opts)}
	servers[0].api().deploy(failoverWorkflow)

	// Runs are started every 200 ms through the servers in turn, each retried
	// with its idempotency key until a server accepts it, as a client would.
	// When the test ends early (a failed require), the clients stop before it
	// completes: an Errorf of theirs after that would panic and fail every other
	// test of the package.
	ids := make([]string, runs)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(i) * 200 * time.Millisecond):
			}
			key := fmt.Sprintf("failover-%d", i)
			for try := 0; ; try++ {
				api := servers[(i+try)%len(servers)].api()
				rctx, cancel := withTimeout(10 * time.Second)
				run, err := api.cl.CreateRun(rctx, "failover", client.StartRunBody{Input: map[string]int{"n": i}}, key)
				cancel()
				if err == nil {
					ids[i] = run.Id
					return
				}
				if try > 200 {
					t.Errorf("run %d: not accepted: %v", i, err)
					return
				}
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}

	// Halfway: the primary dies, and the replica is promoted a second later.
	time.Sleep(time.Duration(runs/2) * 200 * time.Millisecond)
	require.NoError(t, primary.Kill())
	killed := time.Now()
	time.Sleep(time.Second)
	ctx, cancel = withTimeout(time.Minute)
	defer cancel()
	require.NoError(t, standby.Promote(ctx))
	promoted := time.Now()
	t.Logf("primary killed, replica promoted %s later", promoted.Sub(killed).Round(time.Millisecond))

	// Every server answers /readyz 200 within two lease TTLs of the promotion.
	var rw sync.WaitGroup
	back := make([]time.Duration, len(servers))
	for i, s := range servers {
		rw.Add(1)
		go func() {
			defer rw.Done()
			for time.Since(promoted) < time.Minute {
				if s.readyz() == http.StatusOK {
					back[i] = time.Since(promoted)
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			back[i] = -1
		}()
	}
	rw.Wait()
	for i, s := range servers {
		t.Logf("%s ready %s after the promotion", s.name, back[i].Round(time.Millisecond))
		require.True(t, back[i] >= 0 && back[i] <= 2*leaseTTL, "%s ready %s after the promotion, over two lease TTLs", s.name, back[i])
	}

	wg.Wait()
	api := servers[0].api()
	for _, id := range ids {
		require.NotEmpty(t, id)
		require.EventuallyWithT(t, func(c *assert.CollectT) {
			run, err := api.run(id)
			require.NoError(c, err)
			assert.True(c, run.Status.Terminal(), "run %s %s", id, run.Status)
		}, time.Minute, 100*time.Millisecond, "waiting for run %s to end", id)
	}
	noneKilled := func(string) bool { return false }
	for i, id := range ids {
		run, err := api.run(id)
		require.NoError(t, err)
		require.Equal(t, client.RunStatusSucceeded, run.Status, "run %s: %s", id, jsonOf(run.Error))
		api.requireEachStepOnce(t, id, noneKilled)
		require.JSONEq(t, fmt.Sprintf(`{"n":%d}`, i), string(api.output(id, "d")), "run %s", id)
	}
}
