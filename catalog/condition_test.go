package catalog_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// runWith starts a run of a new version with steps and onFailure handlers.
func runWith(t *testing.T, ctx context.Context, s *catalog.Store, steps, onFailure []catalog.NewStep) *catalog.Run {
	t.Helper()
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	v, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "wf", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + hex.EncodeToString(sum[:]),
		Definition: []byte(`{}`), Fingerprint: digest, Steps: steps, OnFailure: onFailure,
	})
	require.NoError(t, err)
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version, Input: json.RawMessage(`{"x":1}`)})
	require.NoError(t, err)
	return run
}

// decideAll decides every pending condition: the keys in pass pass, the others do
// not.
func decideAll(t *testing.T, ctx context.Context, s *catalog.Store, pass ...string) int {
	t.Helper()
	n, err := s.ConditionsDecide(ctx, 100, func(p *catalog.PendingCondition) catalog.ConditionDecision {
		for _, k := range pass {
			if k == p.Key {
				return catalog.ConditionDecision{Pass: true}
			}
		}
		return catalog.ConditionDecision{}
	})
	require.NoError(t, err)
	return n
}

func succeed(t *testing.T, ctx context.Context, s *catalog.Store, c catalog.Claimed) {
	t.Helper()
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `{"from":"`+c.Key+`"}`))
}

func fail(t *testing.T, ctx context.Context, s *catalog.Store, c catalog.Claimed) {
	t.Helper()
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeFailed, false, ""))
}

func skipReason(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID, key string) string {
	t.Helper()
	st, err := s.StepGet(ctx, id, key)
	require.NoError(t, err)
	require.Equal(t, catalog.StepSkipped, st.Status, key)
	require.NotNil(t, st.SkipReason, key)
	return string(*st.SkipReason)
}

// TestConditionSkipsWithoutAttempt: the diamond a → (b, c) → d where b's when is
// false and d waits with none_failed: b is skipped (condition_false) without an
// attempt, d runs once c succeeded, and the run succeeds.
func TestConditionSkipsWithoutAttempt(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{
		{Key: "a", MaxAttempts: 1},
		{Key: "b", Needs: []string{"a"}, MaxAttempts: 1, When: true},
		{Key: "c", Needs: []string{"a"}, MaxAttempts: 1, When: true},
		{Key: "d", Needs: []string{"b", "c"}, MaxAttempts: 1, After: catalog.TriggerNoneFailed},
	})
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"])
	// b and c are ready but not claimable before their conditions are decided.
	claimKeys(t, ctx, s, "d1", 0)
	var seen []string
	n, err := s.ConditionsDecide(ctx, 10, func(p *catalog.PendingCondition) catalog.ConditionDecision {
		seen = append(seen, p.Key)
		require.JSONEq(t, `{"a": {"from": "a"}}`, string(p.Deps))
		require.JSONEq(t, `{"x": 1}`, string(p.Input))
		return catalog.ConditionDecision{Pass: p.Key == "c"}
	})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.ElementsMatch(t, []string{"b", "c"}, seen)
	require.Equal(t, 0, decideAll(t, ctx, s), "decided once")

	require.Equal(t, "condition_false", skipReason(t, ctx, s, r.ID, "b"))
	b, err := s.StepGet(ctx, r.ID, "b")
	require.NoError(t, err)
	require.Equal(t, 0, b.Attempts)
	require.Equal(t, catalog.ConditionFalse, *b.Condition)
	require.Nil(t, b.LastError, "a false condition is no failure")
	atts, err := s.AttemptList(ctx, r.ID, "b")
	require.NoError(t, err)
	require.Empty(t, atts)
	e := lastEvent(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventStepSkipped, e.Type)
	require.JSONEq(t, `{"steps": ["b"], "reason": "condition_false"}`, string(e.Data))

	c := claimKeys(t, ctx, s, "d1", 1)["c"]
	succeed(t, ctx, s, c)
	d := claimKeys(t, ctx, s, "d1", 1)["d"]
	require.JSONEq(t, `{"b": null, "c": {"from": "c"}}`, string(d.Deps))
	succeed(t, ctx, s, d)
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
}

// TestTriggerRules: how each rule follows its upstream, decided when the upstream
// settles; a rule that can no longer hold skips the step, never leaves it waiting.
func TestTriggerRules(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rule catalog.TriggerRule
		// outcome of a and of b, both needed by j.
		aFails, bSkipped bool
		want             string // j's status
		reason           string // j's skip reason
		run              catalog.RunStatus
	}{
		{"all_succeeded, one skipped", catalog.TriggerAllSucceeded, false, true, "skipped", "upstream_skipped", catalog.RunSucceeded},
		{"all_succeeded, one failed", catalog.TriggerAllSucceeded, true, false, "skipped", "upstream_failed", catalog.RunFailed},
		{"none_failed, one skipped", catalog.TriggerNoneFailed, false, true, "succeeded", "", catalog.RunSucceeded},
		{"none_failed, one failed", catalog.TriggerNoneFailed, true, true, "skipped", "upstream_failed", catalog.RunFailed},
		{"all_done, one failed one skipped", catalog.TriggerAllDone, true, true, "succeeded", "", catalog.RunFailed},
		{"any_failed, none failed", catalog.TriggerAnyFailed, false, false, "skipped", "no_upstream_failed", catalog.RunSucceeded},
		{"any_failed, none failed, one skipped", catalog.TriggerAnyFailed, false, true, "skipped", "no_upstream_failed", catalog.RunSucceeded},
		{"any_failed, one failed", catalog.TriggerAnyFailed, true, false, "succeeded", "", catalog.RunFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			// a, and b (with a condition); j needs both and follows rule; k
			// needs j (all_succeeded).
			r := newRun(t, ctx, s, []catalog.NewStep{
				{Key: "a", MaxAttempts: 1},
				{Key: "b", MaxAttempts: 1, When: true},
				{Key: "j", Needs: []string{"a", "b"}, MaxAttempts: 1, After: tt.rule},
				{Key: "k", Needs: []string{"j"}, MaxAttempts: 1},
			})
			pass := []string{"b"}
			if tt.bSkipped {
				pass = nil
			}
			require.Equal(t, 1, decideAll(t, ctx, s, pass...))
			got := claimKeys(t, ctx, s, "d1", len(pass)+1)
			if b, ok := got["b"]; ok {
				succeed(t, ctx, s, b)
			}
			if tt.aFails {
				fail(t, ctx, s, got["a"])
			} else {
				succeed(t, ctx, s, got["a"])
			}
			if tt.want == "succeeded" {
				succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["j"])
				succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["k"])
			} else {
				require.Equal(t, tt.reason, skipReason(t, ctx, s, r.ID, "j"))
				require.Equal(t, "upstream_skipped", skipReason(t, ctx, s, r.ID, "k"))
			}
			require.Equal(t, tt.want, statuses(t, ctx, s, r.ID)["j"])
			run := runOf(t, ctx, s, r.ID)
			require.Equal(t, tt.run, run.Status)
			require.Zero(t, run.StepsRemaining)
		})
	}
}

// TestConditionError: an expression that fails fails its step (no attempt), and
// the run.
func TestConditionError(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 3, When: true}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	n, err := s.ConditionsDecide(ctx, 10, func(*catalog.PendingCondition) catalog.ConditionDecision {
		return catalog.ConditionDecision{Error: json.RawMessage(`{"message": "bad", "code": "expression"}`)}
	})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, map[string]string{"a": "failed", "b": "skipped"}, statuses(t, ctx, s, r.ID))
	run := runOf(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunFailed, run.Status)
	require.Contains(t, string(run.Error), `"code": "expression"`)
}

// TestCompensation: s1 → s2 → s3 where s1 and s2 have compensations and s3
// fails: the run compensates s2 then s1 (reverse completion order, one at a time,
// a failed compensation not stopping the next), then runs its on_failure step,
// then fails with the failed compensation in its error.
func TestCompensation(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := runWith(t, ctx, s, []catalog.NewStep{
		{Key: "s1", MaxAttempts: 1, CompensateAttempts: 1},
		{Key: "s2", Needs: []string{"s1"}, MaxAttempts: 1, CompensateAttempts: 2},
		{Key: "s3", Needs: []string{"s2"}, MaxAttempts: 1, CompensateAttempts: 1},
	}, []catalog.NewStep{{Key: "notify", MaxAttempts: 1}})
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"])
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s2"])
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s3"])

	run := runOf(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunCompensating, run.Status)
	require.Equal(t, 3, run.StepsRemaining)
	require.Equal(t, 6, run.StepsTotal)
	e := lastEvent(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventRunCompensating, e.Type)
	require.JSONEq(t, `{"step": "s3", "steps": ["compensate-s2", "compensate-s1", "notify"]}`, string(e.Data))
	st, err := s.StepGet(ctx, r.ID, "compensate-s2")
	require.NoError(t, err)
	require.Equal(t, catalog.PhaseCompensate, st.Phase)
	require.Equal(t, "s2", *st.Compensates)
	require.Equal(t, 2, st.MaxAttempts)

	// One at a time, s2's first; its deps hold s2's output.
	c2 := claimKeys(t, ctx, s, "d1", 1)["compensate-s2"]
	require.JSONEq(t, `{"s2": {"from": "s2"}}`, string(c2.Deps))
	succeed(t, ctx, s, c2)
	c1 := claimKeys(t, ctx, s, "d1", 1)["compensate-s1"]
	fail(t, ctx, s, c1)
	failure, err := s.RunFailure(ctx, r.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"error": {"message": "step s3 failed", "step": "s3", "cause": {"message": "boom"}},
		"steps": [{"key": "s3", "error": {"message": "boom"}}],
		"compensations": [{"key": "compensate-s2", "compensates": "s2", "status": "succeeded"},
		                  {"key": "compensate-s1", "compensates": "s1", "status": "failed", "error": {"message": "boom"}}]}`, string(failure))
	require.Equal(t, catalog.RunCompensating, runOf(t, ctx, s, r.ID).Status)
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["notify"])

	run = runOf(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunFailed, run.Status)
	var rerr struct {
		Message        string `json:"message"`
		Step           string `json:"step"`
		HandlersFailed []struct {
			Step, Phase, Compensates string
		} `json:"handlers_failed"`
	}
	require.NoError(t, json.Unmarshal(run.Error, &rerr))
	require.Equal(t, "step s3 failed; failure handler compensate-s1 failed too", rerr.Message)
	require.Equal(t, "s3", rerr.Step)
	require.Len(t, rerr.HandlersFailed, 1)
	require.Equal(t, "compensate-s1", rerr.HandlersFailed[0].Step)
	require.Equal(t, "s1", rerr.HandlersFailed[0].Compensates)

	// A retry runs the failed steps again; the handlers go with the failure.
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"s1": "succeeded", "s2": "succeeded", "s3": "ready"}, statuses(t, ctx, s, r.ID))
	run = runOf(t, ctx, s, r.ID)
	require.Equal(t, 3, run.StepsTotal)
	require.Equal(t, 1, run.StepsRemaining)
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s3"])
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
}

// TestCompensatingCancel: a compensating run can be canceled; a run that fails
// with no handler fails at once, as before.
func TestCompensatingCancel(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := runWith(t, ctx, s, []catalog.NewStep{
		{Key: "s1", MaxAttempts: 1, CompensateAttempts: 1},
		{Key: "s2", Needs: []string{"s1"}, MaxAttempts: 1},
	}, nil)
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"])
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s2"])
	require.Equal(t, catalog.RunCompensating, runOf(t, ctx, s, r.ID).Status)
	require.NoError(t, s.RunCancel(ctx, r.ID, "enough"))
	require.Equal(t, map[string]string{"s1": "succeeded", "s2": "failed", "compensate-s1": "canceled"}, statuses(t, ctx, s, r.ID))
	require.Equal(t, catalog.RunCanceled, runOf(t, ctx, s, r.ID).Status)

	plain := runWith(t, ctx, s, []catalog.NewStep{{Key: "s1", MaxAttempts: 1}, {Key: "s2", Needs: []string{"s1"}, MaxAttempts: 1}}, nil)
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"])
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s2"])
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, plain.ID).Status)

	// With on_failure steps and nothing to compensate, they run at once; one that
	// fails is in the run's error.
	notified := runWith(t, ctx, s, []catalog.NewStep{{Key: "s1", MaxAttempts: 1}},
		[]catalog.NewStep{{Key: "n1", MaxAttempts: 1}, {Key: "n2", MaxAttempts: 1}})
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"])
	require.Equal(t, catalog.RunCompensating, runOf(t, ctx, s, notified.ID).Status)
	got := claimKeys(t, ctx, s, "d1", 2)
	succeed(t, ctx, s, got["n1"])
	fail(t, ctx, s, got["n2"])
	run := runOf(t, ctx, s, notified.ID)
	require.Equal(t, catalog.RunFailed, run.Status)
	require.Contains(t, string(run.Error), `"handlers_failed": [{"step": "n2", "error": {"message": "boom"}, "phase": "on_failure"}]`)
}

// TestConditionsRetryAndRerun: a retried run decides its conditions again and
// follows its trigger rules afresh; a rerun's fresh steps have them too (both lay
// steps out without knowing of them: cairn_run_relayout completes them).
func TestConditionsRetryAndRerun(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	steps := []catalog.NewStep{
		{Key: "a", MaxAttempts: 1},
		{Key: "b", Needs: []string{"a"}, MaxAttempts: 1, When: true},
		{Key: "c", Needs: []string{"b"}, MaxAttempts: 1, After: catalog.TriggerAnyFailed},
	}
	r := newRun(t, ctx, s, steps)
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"])
	// c follows any_failed, and b was skipped, not failed: c is skipped too.
	require.Equal(t, map[string]string{"a": "failed", "b": "skipped", "c": "skipped"}, statuses(t, ctx, s, r.ID))
	require.Equal(t, "no_upstream_failed", skipReason(t, ctx, s, r.ID, "c"))
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, r.ID).Status)

	_, _, err := s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Actor: "test"})
	require.NoError(t, err)
	for _, key := range []string{"a", "b", "c"} {
		st, err := s.StepGet(ctx, r.ID, key)
		require.NoError(t, err)
		require.Nil(t, st.SkipReason, key)
		require.Zero(t, st.DepsRemaining-len(st.Needs), key)
	}
	b, err := s.StepGet(ctx, r.ID, "b")
	require.NoError(t, err)
	require.Equal(t, catalog.ConditionPending, *b.Condition, "decided again")
	c, err := s.StepGet(ctx, r.ID, "c")
	require.NoError(t, err)
	require.Equal(t, catalog.TriggerAnyFailed, c.TriggerRule)
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"])
	require.Equal(t, 1, decideAll(t, ctx, s, "b"))
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["b"])
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["c"])
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, r.ID).Status)

	rerun, _, _, err := s.RunRerun(ctx, &catalog.RunRerunParams{Source: r.ID, FromStep: "b", Actor: "test"})
	require.NoError(t, err)
	b, err = s.StepGet(ctx, rerun.ID, "b")
	require.NoError(t, err)
	require.Equal(t, catalog.ConditionPending, *b.Condition)
	c, err = s.StepGet(ctx, rerun.ID, "c")
	require.NoError(t, err)
	require.Equal(t, catalog.TriggerAnyFailed, c.TriggerRule)
	require.Equal(t, 1, decideAll(t, ctx, s))
	require.Equal(t, "condition_false", skipReason(t, ctx, s, rerun.ID, "b"))
	require.Equal(t, "no_upstream_failed", skipReason(t, ctx, s, rerun.ID, "c"))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, rerun.ID).Status)
}
