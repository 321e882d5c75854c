package maintenance_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime/runtimetest"
)

type testBundle struct {
	store *catalog.Store
	blobs blobstore.Store
	env   *runtimetest.Env
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	env := runtimetest.New(t)
	return context.Background(), &testBundle{store: env.Store, blobs: env.Blobs, env: env}
}

// start runs s until the test ends.
func start(t *testing.T, s maintenance.Service) {
	t.Helper()
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
}

// TestServiceLifecycle: every service starts once, stops (twice, and before
// Start, without error), and does not start again once stopped.
func TestServiceLifecycle(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	tests := []struct {
		name string
		new  func() maintenance.Service
	}{
		{"reaper", func() maintenance.Service { return maintenance.NewReaper(tb.store, tb.blobs, nil) }},
		{"collector", func() maintenance.Service {
			c, err := maintenance.NewCollector(tb.store, tb.blobs.(maintenance.CollectorBlobs), nil)
			require.NoError(t, err)
			return c
		}},
		{"schedule firer", func() maintenance.Service { return maintenance.NewScheduleFirer(tb.store, nil) }},
		{"event flow firer", func() maintenance.Service { return maintenance.NewEventFlowFirer(tb.store, nil) }},
		{"operation worker", func() maintenance.Service { return maintenance.NewOperationWorker(tb.store, nil) }},
		{"span exporter", func() maintenance.Service { return maintenance.NewSpanExporter(tb.store, nil) }},
		{"registry", func() maintenance.Service {
			r, err := maintenance.NewRegistry(tb.store, "lifecycle", nil, nil)
			require.NoError(t, err)
			return r
		}},
	}
	for _, tt := range tests {
		s := tt.new()
		require.NoError(t, s.Start(ctx), tt.name)
		require.Error(t, s.Start(ctx), "%s: a second Start", tt.name)
		require.NoError(t, s.Stop(ctx), tt.name)
		require.NoError(t, s.Stop(ctx), "%s: a second Stop", tt.name)
		require.Error(t, s.Start(ctx), "%s: a stopped service does not start", tt.name)

		s = tt.new()
		require.NoError(t, s.Stop(ctx), "%s: Stop before Start", tt.name)
		require.Error(t, s.Start(ctx), "%s: a stopped service does not start", tt.name)
	}
}

// recorder is a Service that notes its starts and stops in a shared log, and
// fails to start when failStart says so.
type recorder struct {
	name      string
	log       *[]string
	failStart bool
}

func (r *recorder) Start(context.Context) error {
	if r.failStart {
		return errors.New(r.name + " cannot start")
	}
	*r.log = append(*r.log, "start "+r.name)
	return nil
}

func (r *recorder) Stop(context.Context) error {
	*r.log = append(*r.log, "stop "+r.name)
	return nil
}

// TestGroup: a group starts its services in order and stops them in the reverse
// order; when one cannot start, those started are stopped again.
func TestGroup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var log []string
	g := maintenance.Group{&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log}}
	require.NoError(t, g.Start(ctx))
	require.NoError(t, g.Stop(ctx))
	require.Equal(t, []string{"start a", "start b", "stop b", "stop a"}, log)

	log = nil
	g = maintenance.Group{&recorder{name: "a", log: &log}, &recorder{name: "b", log: &log, failStart: true},
		&recorder{name: "c", log: &log}}
	require.ErrorContains(t, g.Start(ctx), "b cannot start")
	require.Equal(t, []string{"start a", "stop a"}, log)
}

// TestScheduleFirer: a started firer creates the runs of a due schedule, labeled
// with its name, and counts them.
func TestScheduleFirer(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	reg := prometheus.NewRegistry()
	start(t, maintenance.NewScheduleFirer(tb.store, &maintenance.ScheduleFirerConfig{Interval: 50 * time.Millisecond, Registerer: reg}))
	tb.env.Deploy(t, map[string]string{"cairn.yaml": `
name: ticking
schedules:
  - {name: tick, cron: "* * * * * *"}
steps:
  - {key: a, builtin: noop}
`})
	// Waiting for a fire (every second) to create its run.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		runs, err := tb.store.RunList(ctx, &catalog.RunListParams{Workflow: "ticking",
			Labels: catalog.Labels{catalog.ScheduleLabel: "tick"}, Limit: 10})
		require.NoError(c, err)
		assert.NotEmpty(c, runs)
		// Counted after the fire commits, so it may lag the run: findCounter, as
		// labeledCounter's Fatalf would end the test from this goroutine.
		created, ok, err := findCounter(reg, "cairn_schedule_fires_total", "created")
		assert.NoError(c, err)
		assert.True(c, ok && created >= 1, "cairn_schedule_fires_total{created}: %v", created)
	}, 30*time.Second, 20*time.Millisecond)
}

// TestOperationWorker: a started worker applies a bulk cancel to the runs it
// matched, skipping the one canceled already, and ends the operation.
func TestOperationWorker(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	v := tb.env.Deploy(t, map[string]string{"cairn.yaml": "name: bulk\nsteps:\n  - {key: a, builtin: noop}\n"})
	var ids []uuid.UUID
	for range 3 {
		ids = append(ids, tb.env.StartRun(t, v, ""))
	}
	require.NoError(t, tb.store.RunCancel(ctx, tb.env.StartRun(t, v, ""), "earlier"))
	op, err := tb.store.OperationCreate(ctx, &catalog.OperationCreateParams{Action: catalog.ActionCancel,
		Filter: catalog.RunListParams{Workflow: "bulk"}, Actor: "test"})
	require.NoError(t, err)
	start(t, maintenance.NewOperationWorker(tb.store, &maintenance.OperationWorkerConfig{Owner: "worker"}))
	// Waiting for the worker to take the operation and finish it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got, err := tb.store.OperationGet(ctx, op.ID)
		require.NoError(c, err)
		assert.Equal(c, catalog.OperationSucceeded, got.Status)
	}, 30*time.Second, 20*time.Millisecond)
	got, err := tb.store.OperationGet(ctx, op.ID)
	require.NoError(t, err)
	require.Equal(t, 4, got.Processed)
	require.Equal(t, 3, got.Applied)
	require.Equal(t, 1, got.Skipped)
	for _, id := range ids {
		r, err := tb.store.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, catalog.RunCanceled, r.Status, id)
	}
}

// TestRegistry: a started registry lists its dispatcher, with its tags, among the
// live ones, and Stop removes it.
func TestRegistry(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	r, err := maintenance.NewRegistry(tb.store, "registered", []string{"gpu"}, nil)
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	live := func() map[string][]string {
		list, err := tb.store.DispatcherList(ctx)
		require.NoError(t, err)
		out := map[string][]string{}
		for _, d := range list {
			out[d.ID] = slices.Clone(d.Tags)
		}
		return out
	}
	// Waiting for the first beat.
	require.Eventually(t, func() bool { _, ok := live()["registered"]; return ok }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, []string{"gpu"}, live()["registered"])
	require.NoError(t, r.Stop(ctx))
	require.NotContains(t, live(), "registered", "Stop removes the row")

	_, err = maintenance.NewRegistry(tb.store, "", nil, nil)
	require.Error(t, err, "a registry needs its dispatcher's name")
}

// TestOnDBError: a service whose database call fails says so through OnDBError
// (cairn serve hands it the dispatcher's runtime.Dispatcher.NoteDBError).
func TestOnDBError(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	store, err := catalog.Open(context.Background(), tb.env.DatabaseURL, nil)
	require.NoError(t, err)
	require.NoError(t, store.Close()) // every call fails
	noted := 0
	reaper := maintenance.NewReaper(store, tb.blobs, &maintenance.ReaperConfig{OnDBError: func() { noted++ }})
	require.Equal(t, 0, reaper.Reap(context.Background()))
	require.Equal(t, 3, noted, "the listing of expired runs, the expiry of keys and that of received events failed")
}
