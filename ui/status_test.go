package ui

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
)

func TestErrorOf(t *testing.T) {
	t.Parallel()
	run := map[string]any{"message": "step load failed", "step": "load",
		"cause": map[string]any{"code": "exit_status", "message": "exit status 3\nstderr: relation \"x\" does not exist", "retryable": true}}
	e := errorOf(run)
	require.Equal(t, "step load: exit_status: exit status 3", e.Line())
	require.Equal(t, `stderr: relation "x" does not exist`, e.More, "the rest of the message with its line breaks")
	require.Contains(t, e.JSON, `"retryable": true`)
	require.Nil(t, errorOf(nil))
	// A handler's own code reads before Cairn's function_error.
	sdk := map[string]any{"code": "function_error", "handler_code": "declined", "message": "card declined", "retryable": false}
	require.Equal(t, "declined: card declined", errorOf(sdk).Line())
	require.Equal(t, "step pay: declined: card declined", errorOf(map[string]any{"message": "step pay failed", "step": "pay", "cause": sdk}).Line())

	// Retryable only while the step will try again.
	raw := map[string]any{"code": "boom", "message": "no", "retryable": true}
	require.False(t, errorOf(raw).withRetry(raw, client.Step{Status: client.StepStatusFailed, Attempts: 3, MaxAttempts: 3}).Retryable)
	require.True(t, errorOf(raw).withRetry(raw, client.Step{Status: client.StepStatusReady, Attempts: 1, MaxAttempts: 3}).Retryable)
}

func TestWhyOf(t *testing.T) {
	t.Parallel()
	name, two, one := "paid", int64(2), int64(1)
	tenant, acme := "tenant", "acme"
	running := &client.Run{Status: client.RunStatusRunning}
	runningSteps := "running_steps"
	tests := []struct {
		name  string
		run   *client.Run
		steps []client.Step
		kind  string
		text  string
	}{
		{"signal", running, []client.Step{{Key: "pay", Status: client.StepStatusSuspended, WaitingFor: &client.WaitingFor{Kind: client.WaitingForKindSignal, Name: &name}}},
			"waiting", "waiting: signal paid"},
		{"approval", running, []client.Step{{Key: "sign", Status: client.StepStatusSuspended, WaitingFor: &client.WaitingFor{Kind: client.WaitingForKindApproval, Required: &two, Approvals: &one}}},
			"waiting", "waiting: approval 1/2 (sign)"},
		{"blocked", running, []client.Step{{Key: "nap", Status: client.StepStatusReady, BlockedBy: &client.BlockedBy{Kind: client.BlockedByKindConcurrency, Name: &tenant, Key: &acme, InUse: &two, Limit: &two}}},
			"blocked", "blocked: concurrency tenant (acme) 2/2"},
		{"quota", running, []client.Step{{Key: "nap", Status: client.StepStatusReady, BlockedBy: &client.BlockedBy{Kind: client.BlockedByKindQuota, Name: &runningSteps, Key: &acme, InUse: &two, Limit: &two}}},
			"blocked", "blocked: quota running_steps (namespace acme) 2/2"},
		{"running", running, []client.Step{{Key: "a", Status: client.StepStatusRunning}}, "running", "running: a"},
		{"paused", &client.Run{Status: client.RunStatusPaused, PauseReason: ptr(client.RunPauseReason("workflow"))}, nil, "paused", "paused (workflow)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := whyOf(tt.run, tt.steps)
			require.Equal(t, tt.kind, w.Kind)
			require.Equal(t, tt.text, w.Text)
		})
	}
	require.Nil(t, whyOf(&client.Run{Status: client.RunStatusSucceeded}, nil))
}

// TestStepPanelBlockedBy: the step panel says what holds a ready step back: a
// concurrency key by its key, a namespace's quota by its namespace, each with
// its use.
func TestStepPanelBlockedBy(t *testing.T) {
	t.Parallel()
	pages, err := parsePages()
	require.NoError(t, err)
	two, five := int64(2), int64(5)
	tenant, acme, runningSteps := "tenant", "acme", "running_steps"
	for _, tt := range []struct {
		blocked client.BlockedBy
		want    string
	}{
		{client.BlockedBy{Kind: client.BlockedByKindConcurrency, Name: &tenant, Key: &acme, InUse: &two, Limit: &two},
			"blocked by concurrency tenant (key acme): 2/2 in use"},
		{client.BlockedBy{Kind: client.BlockedByKindQuota, Name: &runningSteps, Key: &acme, InUse: &five, Limit: &five},
			"blocked by quota running_steps (namespace acme): 5/5 in use"},
	} {
		var b strings.Builder
		v := view{LoggedIn: true, Data: &stepView{RunID: "r", Step: client.Step{Key: "s", Status: client.StepStatusReady, BlockedBy: &tt.blocked}}}
		require.NoError(t, pages["step"].ExecuteTemplate(&b, "step.html", v))
		require.Contains(t, b.String(), tt.want)
	}
}
