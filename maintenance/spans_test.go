package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
)

// TestTraceWaitsAndCancel: a step that waits (a durable sleep, suspended: no
// attempt records its end) has its step span under its run's once the wait is over,
// and its run's span is recorded when that step's end ends the run; a canceled run's
// span is recorded, failed with the status canceled, and so is the span of its
// step that was waiting for a signal.
func TestTraceWaitsAndCancel(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	exp := tracetest.NewInMemoryExporter()
	tracer := tracing.NewSyncer(exp)
	tb.env.Start(t, runtime.Config{Tracer: tracer})
	start(t, maintenance.NewSpanExporter(tb.store, &maintenance.SpanExporterConfig{Tracer: tracer, Interval: 50 * time.Millisecond}))
	spans := func(c *assert.CollectT, run string) map[string]tracetest.SpanStub {
		out := map[string]tracetest.SpanStub{}
		for _, s := range exp.GetSpans() {
			for _, a := range s.Attributes {
				if a.Key == "cairn.run_id" && a.Value.AsString() == run {
					out[s.Name] = s
				}
			}
		}
		return out
	}

	napper := tb.env.Deploy(t, map[string]string{"cairn.yaml": "name: napper\nsteps:\n  - {key: nap, sleep: 200ms}\n"})
	id := tb.env.StartRun(t, napper, "")
	require.Equal(t, catalog.RunSucceeded, tb.env.WaitRun(t, id, time.Minute).Status)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := spans(c, id.String())
		require.Contains(c, got, "step nap")
		require.Contains(c, got, "run napper")
		step, run := got["step nap"], got["run napper"]
		assert.Equal(c, tracing.StepSpanID(id, "nap"), step.SpanContext.SpanID())
		assert.Equal(c, tracing.RunSpanID(id), step.Parent.SpanID(), "under the run's span")
		assert.Equal(c, codes.Unset, step.Status.Code)
		assert.GreaterOrEqual(c, step.EndTime.Sub(step.StartTime), 200*time.Millisecond, "the span covers the wait")
		assert.Equal(c, codes.Unset, run.Status.Code)
	}, 30*time.Second, 50*time.Millisecond, "waiting for the spans of the sleep and its run")

	waiter := tb.env.Deploy(t, map[string]string{"cairn.yaml": "name: waiter\nsteps:\n  - {key: paid, signal: {name: paid}}\n"})
	id = tb.env.StartRun(t, waiter, "")
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		st, err := tb.store.StepGet(context.Background(), id, "paid")
		require.NoError(c, err)
		assert.Equal(c, catalog.StepSuspended, st.Status)
	}, 30*time.Second, 20*time.Millisecond, "waiting for the step to wait for its signal")
	require.NoError(t, tb.store.RunCancel(context.Background(), id, "not needed"))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		got := spans(c, id.String())
		require.Contains(c, got, "run waiter")
		require.Contains(c, got, "step paid")
		run := got["run waiter"]
		assert.Equal(c, codes.Error, run.Status.Code)
		assert.Equal(c, "canceled", run.Status.Description)
		assert.Equal(c, "canceled", got["step paid"].Status.Description)
	}, 30*time.Second, 50*time.Millisecond, "waiting for the canceled run's spans")
	n := 0
	for _, s := range exp.GetSpans() {
		if s.Name == "run waiter" {
			n++
		}
	}
	assert.Equal(t, 1, n, "the canceled run's span is recorded once")
}
