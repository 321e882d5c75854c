package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/runtime"
)

// longSleep is a workflow whose one step runs until it is stopped.
const longSleep = `
name: long-sleep
steps:
  - {key: long, builtin: sleep, with: {duration: 10m}, retry: {max_attempts: 1}}
`

// newDispatcher returns a dispatcher not started (runtimetest.Env.Dispatcher).
func newDispatcher(t *testing.T, tb *testBundle, cfg runtime.Config) *runtime.Dispatcher {
	t.Helper()
	return tb.env().Dispatcher(t, cfg)
}

// waitRunning waits until the step of the run holds a lease.
func waitRunning(t *testing.T, tb *testBundle, id uuid.UUID, key string) {
	t.Helper()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, catalog.StepRunning, stepMap(c, tb, id)[key].Status)
	}, 10*time.Second, 10*time.Millisecond, "waiting for step %s to start", key)
}

func TestStopWithoutStart(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	d := newDispatcher(t, tb, runtime.Config{})
	require.NoError(t, d.Stop(ctx))
	require.NoError(t, d.Stop(ctx), "a second Stop")
	require.Error(t, d.Start(ctx), "a stopped dispatcher does not start")
}

func TestStopTwice(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	// The hand-back is recorded within a second grace after the first: 100 ms was
	// cut on a busy CI machine ("gave up recording … after 200ms").
	d := newDispatcher(t, tb, runtime.Config{ShutdownGrace: time.Second})
	require.NoError(t, d.Start(ctx))
	id := startRun(t, tb, deploy(t, tb, map[string]string{"cairn.yaml": longSleep}), "")
	waitRunning(t, tb, id, "long")

	// Two concurrent Stops and a later one: each returns the first one's result.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- d.Stop(ctx) }()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	require.NoError(t, d.Stop(ctx))
	// The lease was handed back.
	require.Equal(t, catalog.StepReady, stepMap(t, tb, id)["long"].Status)
}

// TestStopHonoursContext: a context that ends before the grace cuts Stop short; the
// error says so.
func TestStopHonoursContext(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	d := newDispatcher(t, tb, runtime.Config{ShutdownGrace: time.Hour})
	require.NoError(t, d.Start(ctx))
	id := startRun(t, tb, deploy(t, tb, map[string]string{"cairn.yaml": longSleep}), "")
	waitRunning(t, tb, id, "long")

	sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(sctx) }()
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(time.Minute):
		// Far beyond the context's 200ms: Stop waited for the hour of grace.
		t.Fatal("Stop did not return when its context ended")
	}
}

// TestStopWhileDatabaseDown: PostgreSQL is gone when the dispatcher stops (the
// server got SIGTERM during an outage). Stop gives up on the hand-back after the
// second grace period, by itself, and says so; it does not panic or hang.
func TestStopWhileDatabaseDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testenv.PG(t)
	url := testenv.ClusterDatabaseURL(t, c)
	store, err := catalog.Open(ctx, url, nil)
	require.NoError(t, err)
	t.Cleanup(func() { store.Close() })
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tb := &testBundle{store: store, blobs: blobs, dbURL: url}

	const grace = 500 * time.Millisecond
	d := newDispatcher(t, tb, runtime.Config{ShutdownGrace: grace})
	require.NoError(t, d.Start(ctx))
	id := startRun(t, tb, deploy(t, tb, map[string]string{"cairn.yaml": longSleep}), "")
	waitRunning(t, tb, id, "long")

	require.NoError(t, c.Stop(ctx))
	// A context far longer than the grace: Stop must end by itself.
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err = d.Stop(sctx)
	require.Error(t, err, "the hand-back cannot have been recorded")
	require.NotErrorIs(t, err, context.DeadlineExceeded, "Stop waited for its context instead of giving up after the grace")
	require.Contains(t, err.Error(), "gave up recording")
	require.NoError(t, sctx.Err())
	require.Equal(t, err, d.Stop(ctx), "a second Stop returns the first one's result")

	// The step is still leased to the stopped dispatcher; once the database is back
	// and the lease has expired, another dispatcher takes it over.
	require.NoError(t, c.Start(ctx))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := store.StepGet(ctx, id, "long")
		require.NoError(c, err)
		assert.Equal(c, catalog.StepRunning, st.Status)
	}, 30*time.Second, 50*time.Millisecond, "waiting for the database to answer again")
}

// TestHeartbeatCountsOnlyRealLeaseLosses: an attempt that finishes between the
// heartbeat's snapshot of the active attempts and its renewal no longer holds its
// lease, normally. Many short attempts under a fast heartbeat make that race
// common; none of them may be counted or logged as a lost lease: the counter is
// the number of attempts whose lease really expired (none, unless the machine
// stalls the heartbeats).
func TestHeartbeatCountsOnlyRealLeaseLosses(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	reg := prometheus.NewRegistry()
	// A 300ms lease (the shortest allowed): a heartbeat every 100ms.
	startDispatcher(t, tb, runtime.Config{LeaseTTL: 300 * time.Millisecond, Registerer: reg, Concurrency: 64})
	// A lease can still expire for real when the machine stalls the heartbeats
	// past 300ms (a busy CI machine did): such an attempt is swept as
	// interrupted and tried again, and its loss is a real one.
	var steps strings.Builder
	for i := range 20 {
		fmt.Fprintf(&steps, "  - {key: s%02d, builtin: sleep, with: {duration: %dms}, retry: {max_attempts: 5}}\n", i, 20+7*i)
	}
	v := deploy(t, tb, map[string]string{"cairn.yaml": "name: many-short\nsteps:\n" + steps.String()})
	ids := make([]uuid.UUID, 30)
	for i := range ids {
		ids[i] = startRun(t, tb, v, "")
	}
	interrupted := 0
	for _, id := range ids {
		run := waitRun(t, tb, id, time.Minute)
		require.Equal(t, catalog.RunSucceeded, run.Status, "run error: %s", run.Error)
		for i := range 20 {
			for _, a := range attempts(t, tb, id, fmt.Sprintf("s%02d", i)) {
				if a.Status == catalog.AttemptInterrupted {
					interrupted++
				}
			}
		}
	}
	t.Logf("%d attempts lost their lease for real", interrupted)
	// Each real loss is counted once, by whichever write finds it first; an
	// attempt that finished normally is never counted.
	require.Equal(t, float64(interrupted), counterSum(t, reg, "cairn_lease_lost_total"),
		"leases counted lost other than the %d attempts whose lease really expired", interrupted)
}

// counterSum adds up every series of a counter in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestQueueMetrics: after runs, the histograms of queue wait and attempt duration
// have a sample per attempt under the workflow's name, and the catalog's gauges
// count the steps left ready, running and suspended.
func TestQueueMetrics(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(runtime.NewCatalogGauges(tb.store, nil)))
	v := deploy(t, tb, map[string]string{"cairn.yaml": `name: metered
steps:
  - {key: a, builtin: sleep, with: {duration: 30ms}}
  - {key: b, builtin: sleep, with: {duration: 10ms}, needs: [a]}
`})
	// Before any dispatcher: the run's first step waits in the queue.
	id := startRun(t, tb, v, "")
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		g := gaugeValues(c, reg)
		assert.GreaterOrEqual(c, g["cairn_steps_ready"], 1.0)
		assert.Greater(c, g["cairn_steps_oldest_ready_seconds"], 0.0)
	}, 30*time.Second, 200*time.Millisecond)
	startDispatcher(t, tb, runtime.Config{Registerer: reg})
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)

	families, err := reg.Gather()
	require.NoError(t, err)
	hist := map[string]*dto.Histogram{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetHistogram() == nil {
				continue
			}
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetName() + "=" + l.GetValue()
			}
			hist[name] = m.GetHistogram()
		}
	}
	wait := hist["cairn_queue_wait_seconds,workflow=metered"]
	require.NotNil(t, wait, "no queue wait series for the workflow")
	assert.EqualValues(t, 2, wait.GetSampleCount())
	assert.Greater(t, wait.GetSampleSum(), 0.0, "the first step waited for a dispatcher")
	dur := hist["cairn_attempt_duration_seconds,outcome=succeeded,workflow=metered"]
	require.NotNil(t, dur, "no attempt duration series for the workflow")
	assert.EqualValues(t, 2, dur.GetSampleCount())
	assert.GreaterOrEqual(t, dur.GetSampleSum(), 0.04, "two sleeps of 30ms and 10ms")

	// A step that runs and one in a durable wait are counted as such.
	w := deploy(t, tb, map[string]string{"cairn.yaml": `name: waiting
steps:
  - {key: busy, builtin: sleep, with: {duration: 10m}}
  - {key: nap, sleep: 1h}
`})
	id = startRun(t, tb, w, "")
	t.Cleanup(func() { _ = tb.store.RunCancel(context.Background(), id, "test over") })
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		g := gaugeValues(c, reg)
		assert.Equal(c, 1.0, g["cairn_steps_running"])
		assert.Equal(c, 1.0, g["cairn_steps_suspended"])
		assert.Zero(c, g["cairn_steps_ready"])
		assert.Zero(c, g["cairn_steps_oldest_ready_seconds"])
	}, 30*time.Second, 500*time.Millisecond)
}

// gaugeValues reads every gauge of reg by name (the last series of each).
func gaugeValues(t assert.TestingT, reg *prometheus.Registry) map[string]float64 {
	families, err := reg.Gather()
	assert.NoError(t, err)
	out := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if m.GetGauge() != nil {
				out[f.GetName()] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestLimitGauges: the scrape shows each concurrency limit's use, summed over its
// keys, beside its slots per key: three runs of key a under a limit of two (two
// running, one waiting for a slot) and one of key b.
func TestLimitGauges(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	reg := prometheus.NewRegistry()
	require.NoError(t, reg.Register(runtime.NewCatalogGauges(tb.store, nil)))
	v := deploy(t, tb, map[string]string{"cairn.yaml": `name: pooled
steps:
  - {key: busy, builtin: sleep, with: {duration: 10m}, concurrency: {name: pool, key: "input.k", limit: 2}}
`})
	for _, k := range []string{"a", "a", "a", "b"} {
		id := startRun(t, tb, v, `{"k": "`+k+`"}`)
		t.Cleanup(func() { _ = tb.store.RunCancel(context.Background(), id, "test over") })
	}
	startDispatcher(t, tb, runtime.Config{})
	assert.EventuallyWithT(t, func(c *assert.CollectT) {
		families, err := reg.Gather()
		require.NoError(c, err)
		got := map[string]float64{}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "name" {
						got[f.GetName()+"{"+l.GetValue()+"}"] = m.GetGauge().GetValue()
					}
				}
			}
		}
		assert.Equal(c, map[string]float64{"cairn_limit_in_use{pool}": 3, "cairn_limit{pool}": 2,
			"cairn_limit_ready{pool}": 1, "cairn_limit_keys{pool}": 2}, got)
	}, 30*time.Second, 500*time.Millisecond, "waiting for three running and one ready")
}
