package e2e

import (
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// envScheduleSeconds shortens TestScheduleThreeServers (default 60 seconds).
const envScheduleSeconds = "CAIRN_E2E_SCHEDULE_SECONDS"

// TestScheduleThreeServers is schedules (docs/schedules.md), through the real
// binary: a schedule every second on three servers (each with its fire loop, no
// leader) creates one run per second, none twice and none missed: N runs span N-1
// seconds (±1 at the edges), also when one of the servers is killed halfway;
// pausing it stops the runs. A backfill of one day of an
// hourly schedule creates 24 runs, and a second one none.
func TestScheduleThreeServers(t *testing.T) {
	t.Parallel()
	seconds := 60
	if v := os.Getenv(envScheduleSeconds); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, envScheduleSeconds)
		seconds = n
	}
	st := newStack(t, stackOptions{})
	servers := []*server{st.start(serverOptions{}), st.start(serverOptions{}), st.start(serverOptions{})}
	s := servers[0]

	dir := writeTree(t, map[string]string{"cairn.yaml": `name: clock
steps: [{key: a, builtin: noop}]
schedules:
  - {name: tick, cron: "* * * * * *", overlap: allow}
  - {name: hourly, cron: "0 * 1 1 *", timezone: Europe/Paris}
`})
	s.cli("deploy", dir)

	c := s.api()
	// runs lists the runs of schedule name (through the API: no require inside,
	// it is called from EventuallyWithT's goroutine).
	runs := func(name string) ([]client.Run, error) {
		ctx, cancel := withTimeout(time.Minute)
		defer cancel()
		wf, label, limit := "clock", []string{"schedule=" + name}, int64(1000)
		var out []client.Run
		for r, err := range c.cl.Runs(ctx, &client.ListRunsParams{Workflow: &wf, Label: &label, Limit: &limit}) {
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
	mustRuns := func(name string) []client.Run {
		t.Helper()
		list, err := runs(name)
		require.NoError(t, err)
		return list
	}
	// Halfway, one server is killed (SIGKILL, maybe in the middle of a fire pass):
	// the other two go on, without a leader to elect.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := runs("tick")
		if assert.NoError(c, err) {
			assert.GreaterOrEqual(c, len(list), seconds/2)
		}
	}, time.Duration(seconds)*time.Second, 200*time.Millisecond, "%d runs of the schedule", seconds/2)
	servers[2].kill()
	// Then wait for the schedule's runs: one a second.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		list, err := runs("tick")
		if assert.NoError(c, err) {
			assert.GreaterOrEqual(c, len(list), seconds)
		}
	}, time.Duration(seconds)*time.Second+30*time.Second, 500*time.Millisecond, "%d runs of the schedule", seconds)
	require.Contains(t, s.cli("schedule", "pause", "clock/tick"), "paused")

	// The pause takes the schedule's row lock, so a fire pass that held it has
	// committed: from here on the count does not move.
	final := mustRuns("tick")
	for range 6 { // for three seconds, every half second
		time.Sleep(500 * time.Millisecond)
		require.Len(t, mustRuns("tick"), len(final), "the paused schedule creates no more runs")
	}

	sort.Slice(final, func(i, j int) bool { return final[i].CreatedAt.Before(final[j].CreatedAt) })
	n := len(final)
	span := final[n-1].CreatedAt.Sub(final[0].CreatedAt).Seconds()
	t.Logf("%d runs over %.2fs", n, span)
	require.InDelta(t, float64(n-1), span, 1.5, "one run a second: %d runs over %.2fs", n, span)
	require.InDelta(t, seconds, n, 3, "runs while the test waited for %d", seconds)

	// Backfill one day of the hourly schedule: 24 runs; again: none.
	out := s.cli("schedule", "backfill", "clock/hourly", "--from", "2026-01-01T00:00:00+01:00", "--to", "2026-01-02T00:00:00+01:00")
	require.Equal(t, "24 fire times: 24 runs created, 0 skipped (had their run already)\n", out)
	out = servers[1].cli("schedule", "backfill", "clock/hourly", "--from", "2026-01-01T00:00:00+01:00", "--to", "2026-01-02T00:00:00+01:00")
	require.Equal(t, "24 fire times: 0 runs created, 24 skipped (had their run already)\n", out)
	require.Len(t, mustRuns("hourly"), 24)
}
