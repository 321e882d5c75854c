package e2e

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestServerStartedAfterPostgresOutage: PostgreSQL stops for 10 s while server a
// runs four steps with max_attempts 1; their leases (2 s) run out meanwhile. Server
// b starts the moment PostgreSQL is back, as a supervisor would restart it. b has
// seen no outage of its own, yet its sweeper must not take a's steps: the sweep
// grace runs from the database's start, so a renews its leases first and every
// step succeeds at its first attempt, on a.
func TestServerStartedAfterPostgresOutage(t *testing.T) {
	t.Parallel()
	const outage = 10 * time.Second
	c := testenv.PG(t)
	st := newStack(t, stackOptions{dbURL: testenv.ClusterDatabaseURL(t, c)})
	a := st.start(serverOptions{name: "a"})
	api := a.api()
	var yaml strings.Builder
	yaml.WriteString("name: outage-newcomer\nsteps:\n")
	keys := []string{"w1", "w2", "w3", "w4"}
	for _, k := range keys {
		// Long enough to run through the outage and end after b has started.
		yaml.WriteString("  - {key: " + k + ", exec: [\"./bin/work\"]}\n")
	}
	api.deploy(map[string]string{
		"cairn.yaml": yaml.String(),
		"bin/work":   "#!/bin/bash\necho started >&2\nsleep 16\necho '{\"done\":true}'\n",
	})
	runID := api.startRun("outage-newcomer", 0, nil)
	for _, k := range keys {
		api.waitStep(runID, k, 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })
		// Its handler has started (the live log has its first line): a step is
		// running from its claim, before the dispatcher has loaded the definition,
		// and an outage in between fails that attempt (a clean-clone CI's did).
		require.Eventually(t, func() bool { return strings.Contains(api.logs(runID, k, 1), "started") }, 20*time.Second,
			50*time.Millisecond, "step %s's handler started", k)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	down := time.Now()
	require.NoError(t, c.Stop(ctx))
	require.Eventually(t, func() bool { return a.readyz() == http.StatusServiceUnavailable }, 5*time.Second, 50*time.Millisecond,
		"/readyz of server a during the outage")
	time.Sleep(time.Until(down.Add(outage))) // the outage lasts 10 s
	require.NoError(t, c.Start(ctx))
	b := st.start(serverOptions{name: "b"})
	t.Logf("PostgreSQL was down for %s; server b ready %s after it came back",
		b.started.Sub(down).Round(time.Millisecond), b.ready.Sub(b.started).Round(time.Millisecond))

	run := api.waitRun(runID, time.Minute)
	require.Equal(t, client.RunStatusSucceeded, run.Status, "run error: %s", jsonOf(run.Error))
	for _, k := range keys {
		attempts := api.mustAttempts(runID, k)
		require.Equal(t, []string{"succeeded"}, attemptStatuses(attempts), "step %s: %s", k, jsonOf(attempts))
		require.True(t, a.owns(attempts[0].Dispatcher), "step %s ran on %s, not on server a", k, attempts[0].Dispatcher)
	}
	for _, s := range []*server{a, b} {
		lost, lines := s.metric("cairn_lease_lost_total")
		require.Zero(t, lost, "server %s: %v", s.name, lines)
	}
}

// TestSigtermWhileDatabaseDown: a server told to stop during a PostgreSQL outage
// exits 0 within about twice its shutdown grace: it cannot hand its lease back,
// gives up after the second grace, and says so in its log.
func TestSigtermWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	const grace = 2 * time.Second
	c := testenv.PG(t)
	st := newStack(t, stackOptions{dbURL: testenv.ClusterDatabaseURL(t, c)})
	a := st.start(serverOptions{name: "a", shutdownGrace: grace})
	api := a.api()
	api.deploy(map[string]string{
		"cairn.yaml": "name: sigterm-outage\nsteps:\n  - {key: long, exec: [\"./bin/long\"]}\n",
		"bin/long":   "#!/bin/bash\nsleep 120\n",
	})
	runID := api.startRun("sigterm-outage", 0, nil)
	api.waitStep(runID, "long", 20*time.Second, "running", func(s client.Step) bool { return s.Status == client.StepStatusRunning })

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, c.Stop(ctx))
	require.Eventually(t, func() bool { return a.readyz() == http.StatusServiceUnavailable }, 5*time.Second, 50*time.Millisecond,
		"/readyz of server a during the outage")
	start := time.Now()
	// Twice the grace, and a margin for the handler's termination and the exit.
	a.stop(2*grace + 3*time.Second)
	t.Logf("server exited %s after SIGTERM (grace %s)", time.Since(start).Round(time.Millisecond), grace)
	log := tailFile(a.logPath, 1<<20)
	require.NotContains(t, log, "panic")
	require.Contains(t, log, "gave up recording")
}
