package maintenance_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
)

// TestReapLoop: a started reaper deletes a run past its retention (here the
// server's default), keeps one within it, deletes a received event past the
// idempotency TTL, and counts what it deleted.
func TestReapLoop(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	reg := prometheus.NewRegistry()
	tb.env.Start(t, runtime.Config{})
	start(t, maintenance.NewReaper(tb.store, tb.blobs, &maintenance.ReaperConfig{Interval: 20 * time.Millisecond,
		Registerer: reg, Retention: catalog.RetentionDefaults{Succeeded: time.Hour}}))
	v := tb.env.Deploy(t, map[string]string{"cairn.yaml": "name: quick\nsteps:\n  - {key: a, builtin: noop}\n"})
	old, kept := tb.env.StartRun(t, v, ""), tb.env.StartRun(t, v, "")
	tb.env.WaitRun(t, old, 30*time.Second)
	tb.env.WaitRun(t, kept, 30*time.Second)
	_, err := tb.store.DB().ExecContext(ctx, `UPDATE runs SET finished_at = now() - interval '2 hours' WHERE id = $1`, old)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := tb.store.RunGet(ctx, old)
		return err != nil
	}, 30*time.Second, 10*time.Millisecond)
	_, err = tb.store.RunGet(ctx, old)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = tb.store.RunGet(ctx, kept)
	require.NoError(t, err)
	require.Equal(t, 1.0, counter(t, reg, "cairn_runs_reaped_total"))

	for _, id := range []string{"old", "new"} {
		_, _, err = tb.store.EventIngest(ctx, &catalog.EventIngestParams{ID: id, Name: "e", Data: []byte(`{}`), Actor: "test"})
		require.NoError(t, err)
	}
	_, err = tb.store.DB().ExecContext(ctx, `UPDATE received_events SET received_at = now() - interval '2 days' WHERE id = 'old'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := tb.store.ReceivedEventGet(ctx, "old")
		return err != nil
	}, 30*time.Second, 10*time.Millisecond)
	_, err = tb.store.ReceivedEventGet(ctx, "old")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = tb.store.ReceivedEventGet(ctx, "new")
	require.NoError(t, err)
	require.Equal(t, 1.0, counter(t, reg, "cairn_received_events_expired_total"))
}

// counter reads a registered counter by name.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
