package runtime_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/runtime"
)

// progressEvents returns the progress values of a run's step.progress events, in
// order.
func progressEvents(t *testing.T, tb *testBundle, id uuid.UUID) []json.RawMessage {
	t.Helper()
	var out []json.RawMessage
	for _, data := range eventData(t, tb, id, catalog.EventStepProgress) {
		var d struct{ Progress json.RawMessage }
		require.NoError(t, json.Unmarshal(data, &d))
		out = append(out, d.Progress)
	}
	return out
}

// TestProgressCoalesced (50,000 reports once made 50,000 event rows): a handler
// that reports its progress 5,000 times as fast as it can gets a burst of events,
// then about one a second; its last report is the last event, recorded before the
// step's end.
func TestProgressCoalesced(t *testing.T) {
	t.Parallel()
	_, tb := setup(t)
	startDispatcher(t, tb, runtime.Config{})
	v := deploy(t, tb, map[string]string{
		"cairn.yaml": `
name: chatty
steps:
  - {key: work, exec: ["./bin/work"]}
`,
		"bin/work": "#!/bin/sh\ncat >/dev/null\nseq 1 5000 | sed 's/.*/{\"progress\": {\"done\": &, \"of\": 5000}}/' >&3\necho '{\"ok\": true}'\n",
	})
	id := startRun(t, tb, v, "")
	require.Equal(t, catalog.RunSucceeded, waitRun(t, tb, id, time.Minute).Status)
	got := progressEvents(t, tb, id)
	a := attempts(t, tb, id, "work")
	require.Len(t, a, 1)
	took := a[0].FinishedAt.Sub(a[0].StartedAt)
	// A burst of 10, one per second of the attempt, and the last report.
	require.LessOrEqual(t, len(got), 10+int(took/time.Second)+2, "%d events in %s", len(got), took)
	require.JSONEq(t, `{"done": 1, "of": 5000}`, string(got[0]))
	require.JSONEq(t, `{"done": 5000, "of": 5000}`, string(got[len(got)-1]), "the last report is never lost")

	// The last progress event comes before the step's end.
	events, err := tb.store.EventList(context.Background(), id, 0, 10000)
	require.NoError(t, err)
	var lastProgress, succeeded int64
	for _, e := range events {
		switch e.Type {
		case catalog.EventStepProgress:
			lastProgress = e.Seq
		case catalog.EventStepSucceeded:
			succeeded = e.Seq
		}
	}
	require.Less(t, lastProgress, succeeded)
}
