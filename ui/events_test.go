package ui

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestEventWaitWhy: a run waiting for an event says which.
func TestEventWaitWhy(t *testing.T) {
	t.Parallel()
	name := "payment.succeeded"
	w := whyOf(&client.Run{Status: client.RunStatusRunning}, []client.Step{{Key: "pay", Status: client.StepStatusSuspended,
		WaitingFor: &client.WaitingFor{Kind: client.WaitingForKindEvent, Name: &name}}})
	require.Equal(t, "waiting: event payment.succeeded", w.Text)
}

// TestEventFlow: what flow control did with an event is said from the fields
// its entries have, and an entry of another shape as its JSON; skipped starts
// are counted.
func TestEventFlow(t *testing.T) {
	t.Parallel()
	var ev receivedEvent
	require.NoError(t, json.Unmarshal([]byte(`{"event_id": "e1", "name": "order.created", "data": {"a": 1},
		"started": [], "resumed": [], "canceled": [],
		"flow": [{"workflow": "orders", "version": 3, "trigger": 0, "kind": "singleton", "action": "skipped", "key": "o-1", "run_id": "0193a000-0000-7000-8000-000000000001"},
		         {"workflow": "digest", "version": 1, "trigger": 2, "kind": "batch", "action": "batched", "key": "", "pending": 7, "events": 3},
		         {"something": "else"}]}`), &ev))
	require.Equal(t, []flowView{
		{Action: "skipped", RunID: "0193a000-0000-7000-8000-000000000001", Text: "orders v3 triggers[0], singleton, key o-1"},
		{Action: "batched", Text: "digest v1 triggers[2], batch, 3 events held"},
		{Text: `{"something":"else"}`},
	}, ev.FlowText())
	require.Equal(t, 1, ev.Skipped())
	require.Equal(t, 0, ev.Runs())
	require.Equal(t, "{\n  \"a\": 1\n}", ev.DataText())
}
