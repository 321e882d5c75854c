package maintenance_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/maintenance"
)

// TestEventFlowFirer: a started firer starts a debounce window's run once the key
// has been quiet for its period (1 s: the three events come well within it), with
// the last event's data, and counts it.
func TestEventFlowFirer(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	reg := prometheus.NewRegistry()
	start(t, maintenance.NewEventFlowFirer(tb.store, &maintenance.EventFlowFirerConfig{Interval: 50 * time.Millisecond, Registerer: reg}))
	tb.env.Deploy(t, map[string]string{"cairn.yaml": `
name: settle
triggers:
  - {event: doc.changed, debounce: {key: "event.data.doc", period: 1s}}
steps:
  - {key: a, builtin: noop}
`})
	for i := 1; i <= 3; i++ {
		_, _, err := tb.store.EventIngest(ctx, &catalog.EventIngestParams{Name: "doc.changed",
			Data: json.RawMessage(fmt.Sprintf(`{"doc":"a","n":%d}`, i)), Actor: "test"})
		require.NoError(t, err)
	}
	// Waiting for the window to come due and its run to start.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		runs, err := tb.store.RunList(ctx, &catalog.RunListParams{Workflow: "settle", Limit: 10})
		require.NoError(c, err)
		if !assert.Len(c, runs, 1) {
			return
		}
		run, err := tb.store.RunGet(ctx, runs[0].ID)
		require.NoError(c, err)
		assert.JSONEq(c, `{"doc":"a","n":3}`, string(run.Input))
		n, ok, err := findCounter(reg, "cairn_event_flow_runs_total", "debounce")
		assert.NoError(c, err)
		assert.True(c, ok && n == 1, "cairn_event_flow_runs_total{debounce}: %v", n)
	}, 30*time.Second, 20*time.Millisecond)
}
