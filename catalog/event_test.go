package catalog_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// TestEventTypeFinal: the events that end a run's history are those of its
// terminal statuses, and no others.
func TestEventTypeFinal(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ   catalog.EventType
		final bool
	}{
		{catalog.EventRunSucceeded, true},
		{catalog.EventRunFailed, true},
		{catalog.EventRunCanceled, true},
		{catalog.EventRunCreated, false},
		{catalog.EventRunRetried, false},
		{catalog.EventRunPaused, false},
		{catalog.EventRunResumed, false},
		{catalog.EventRunCompensating, false},
		{catalog.EventStepSucceeded, false},
		{catalog.EventStepFailed, false},
		{"step.canceled", false},
	} {
		require.Equal(t, tc.final, tc.typ.Final(), "%s", tc.typ)
	}
}

// TestCheckpointEventData: a step.checkpointed event shows a checkpoint of up to
// 1 KiB whole (a $blob reference always is), a larger one only by its size.
func TestCheckpointEventData(t *testing.T) {
	t.Parallel()
	small := json.RawMessage(`{"page":3}`)
	require.JSONEq(t, `{"checkpoint":{"page":3}}`, string(catalog.CheckpointEventData(small)))
	atLimit := json.RawMessage(`"` + strings.Repeat("x", catalog.EventValueShown-2) + `"`)
	require.JSONEq(t, `{"checkpoint":`+string(atLimit)+`}`, string(catalog.CheckpointEventData(atLimit)))
	over := json.RawMessage(`"` + strings.Repeat("x", catalog.EventValueShown-1) + `"`)
	require.JSONEq(t, `{"size":1025}`, string(catalog.CheckpointEventData(over)))
}
