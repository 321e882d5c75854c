package testrun

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// ordersFixture is a recorded run of testdata/orders as cairn run export
// writes it: every step's definition as the version's, but charge's as
// changed (when changed is true).
func ordersFixture(t *testing.T, r *Runner, changed bool) *Fixture {
	t.Helper()
	digests, err := StepDigests(r.Definition())
	require.NoError(t, err)
	at := Duration(0)
	fx := &Fixture{Format: FixtureFormat, RunID: "r1", Workflow: "orders", Version: 1, Status: "failed",
		Input: json.RawMessage(`{"order": 9}`)}
	for _, s := range []FixtureStep{
		{Key: "charge", Status: "succeeded", Output: json.RawMessage(`{"paid": true, "id": "ch_9"}`),
			Attempts: []FixtureAttempt{{Status: "failed", Error: json.RawMessage(`{"message": "gateway down", "code": "gateway", "retryable": true}`)}, {Status: "succeeded"}}},
		{Key: "ship", Status: "succeeded", Output: json.RawMessage(`{"shipped": true}`), Attempts: []FixtureAttempt{{Status: "succeeded"}}},
		{Key: "invoice", Status: "failed", Attempts: []FixtureAttempt{{Status: "failed", Error: json.RawMessage(`{"message": "no invoice service", "retryable": false}`)}}},
		{Key: "compensate-charge", Status: "succeeded", Output: json.RawMessage(`"refunded"`), Attempts: []FixtureAttempt{{Status: "succeeded"}}},
	} {
		s.Definition, s.At = digests[s.Key], &at
		if changed && s.Key == "charge" {
			s.Definition = "sha256:changed"
		}
		fx.Steps = append(fx.Steps, s)
	}
	return fx
}

// TestReplayPlan: a replay reuses the recorded outcomes of the steps whose
// definition did not change, attempt by attempt (charge's retry comes back
// on the virtual clock); a changed step runs again with every step downstream
// of it and its compensation.
func TestReplayPlan(t *testing.T) {
	t.Parallel()
	r := runnerFor(t, "testdata/orders", nil)

	c, plan, err := r.Replay(ordersFixture(t, r, false))
	require.NoError(t, err)
	require.Equal(t, []string{"charge", "compensate-charge", "invoice", "ship"}, plan.Reused)
	require.Empty(t, plan.Changed)
	res := r.Run(context.Background(), c)
	require.NoError(t, res.Err)
	require.Empty(t, res.Failures)
	require.Equal(t, "failed", res.Run.Status)
	require.Equal(t, 2, res.Run.Step("charge").Attempts)
	require.JSONEq(t, `{"paid": true, "id": "ch_9"}`, string(res.Run.Step("charge").Output))
	require.Empty(t, res.Handlers, "every step answered as recorded")

	_, plan, err = r.Replay(ordersFixture(t, r, true))
	require.NoError(t, err)
	require.Empty(t, plan.Reused)
	require.Equal(t, []string{"charge"}, plan.Changed)
	require.Equal(t, []string{"compensate-charge", "invoice", "ship"}, plan.Dependents)

	fx := ordersFixture(t, r, false)
	fx.Steps = append(fx.Steps, FixtureStep{Key: "audit"}, FixtureStep{Key: "notify"})
	_, _, err = r.Replay(fx)
	require.EqualError(t, err, "the fixture names steps that version 1 of orders lacks: audit, notify")
	fx.Workflow = "billing"
	_, _, err = r.Replay(fx)
	require.ErrorContains(t, err, "the fixture is a run of workflow billing, the bundle is workflow orders")
}
