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

// TestEventSkipped: an event's skipped starts are said from the fields they
// have, and an entry of another shape as its JSON.
func TestEventSkipped(t *testing.T) {
	t.Parallel()
	var ev receivedEvent
	require.NoError(t, json.Unmarshal([]byte(`{"event_id": "e1", "name": "order.created", "data": {"a": 1},
		"started": [], "resumed": [], "canceled": [],
		"skipped": [{"workflow": "orders", "version": 3, "trigger": 0, "reason": "singleton", "key": "o-1", "run_id": "0193a000-0000-7000-8000-000000000001"},
		            {"something": "else"}]}`), &ev))
	require.Equal(t, []skippedView{
		{Text: "orders v3 triggers[0], reason singleton, key o-1", RunID: "0193a000-0000-7000-8000-000000000001"},
		{Text: `{"something":"else"}`},
	}, ev.SkippedText())
	require.Equal(t, 0, ev.Runs())
	require.Equal(t, "{\n  \"a\": 1\n}", ev.DataText())
}
