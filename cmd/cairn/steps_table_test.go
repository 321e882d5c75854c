package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

// TestWriteStepsHandlers: the step table shows why a step was skipped and lists the
// failure handlers after the workflow's steps, in the order they ran.
func TestWriteStepsHandlers(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s int) *time.Time { v := now.Add(time.Duration(s) * time.Second); return &v }
	ptr := func(s string) *string { return &s }
	reason := func(r client.StepSkipReason) *client.StepSkipReason { return &r }
	steps := []client.Step{
		{Key: "notify", Status: client.StepStatusSucceeded, Phase: client.OnFailure, Needs: &[]string{}},
		{Key: "compensate-s1", Status: client.StepStatusSucceeded, Phase: client.Compensate, Compensates: ptr("s1"), Needs: &[]string{"s1"}},
		{Key: "compensate-s2", Status: client.StepStatusSucceeded, Phase: client.Compensate, Compensates: ptr("s2"), Needs: &[]string{"s2"}},
		{Key: "s1", Status: client.StepStatusSucceeded, Phase: client.Main, FinishedAt: at(1), Needs: &[]string{}},
		{Key: "s2", Status: client.StepStatusSucceeded, Phase: client.Main, FinishedAt: at(2), Needs: &[]string{"s1"}},
		{Key: "maybe", Status: client.StepStatusSkipped, Phase: client.Main, SkipReason: reason(client.ConditionFalse), Needs: &[]string{"s1"}},
		{Key: "s3", Status: client.StepStatusFailed, Phase: client.Main, Needs: &[]string{"s2"}},
	}
	var b bytes.Buffer
	require.NoError(t, writeSteps(&b, steps, now))
	var keys []string
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	for _, l := range lines[1:] {
		keys = append(keys, strings.Fields(l)[0])
	}
	require.Equal(t, []string{"s1", "maybe", "s2", "s3", "compensate-s2", "compensate-s1", "notify"}, keys)
	require.Contains(t, b.String(), "skipped: condition_false")
	require.Contains(t, b.String(), "compensates s2")
	require.Contains(t, b.String(), "on_failure")
}
