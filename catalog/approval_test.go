package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
)

// approvalRun starts a run whose step "gate" (then "after") is an approval that
// suspends with rule a; it returns the run.
func approvalRun(t *testing.T, ctx context.Context, s *catalog.Store, a catalog.Approval) *catalog.Run {
	t.Helper()
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "gate", MaxAttempts: 1}, {Key: "after", Needs: []string{"gate"}, MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["gate"]
	require.NoError(t, s.ApprovalSuspend(ctx, lease(c), a))
	return r
}

func decide(ctx context.Context, s *catalog.Store, id uuid.UUID, who, role string, d catalog.Decision, comment string) (*catalog.DecisionResult, error) {
	return s.StepDecide(ctx, &catalog.StepDecision{RunID: id, Key: "gate", Approver: who, Role: role, Decision: d, Comment: comment})
}

// TestStepDecideTwoApprovers: a required-2 approval completes with two distinct
// approvers; the same approver twice counts once; a role not among the step's
// roles is refused; a decision after the step ended is a run-state conflict, a
// repeat of an approver's own too.
func TestStepDecideTwoApprovers(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 2, Roles: []string{"operator"}})
	st, err := s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Equal(t, catalog.WaitApproval, *st.WaitKind)
	require.Equal(t, 2, *st.ApprovalRequired)

	res, err := s.StepDecide(ctx, &catalog.StepDecision{RunID: r.ID, Key: "gate", Approver: "alice", Role: "operator",
		Decision: catalog.DecisionApproved, Comment: "lgtm", Input: json.RawMessage(`{"ticket":7}`)})
	require.NoError(t, err)
	require.Equal(t, catalog.DecisionResult{Decision: catalog.DecisionApproved, Counted: true}, *res)
	typ, data := lastEventData(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventStepApproved, typ)
	require.Equal(t, "alice", data["actor"])
	require.EqualValues(t, 1, data["approvals"])

	// alice again, even rejecting: her first decision stands, nothing written.
	for _, d := range []catalog.Decision{catalog.DecisionApproved, catalog.DecisionRejected} {
		res, err = decide(ctx, s, r.ID, "alice", "operator", d, "")
		require.NoError(t, err)
		require.Equal(t, catalog.DecisionResult{Decision: catalog.DecisionApproved, Counted: false}, *res)
	}
	st, err = s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Equal(t, 1, st.Approvals)

	_, err = decide(ctx, s, r.ID, "vera", "viewer", catalog.DecisionApproved, "")
	require.ErrorIs(t, err, catalog.ErrForbidden)
	require.Contains(t, catalog.Reason(err), "operator")

	res, err = decide(ctx, s, r.ID, "bob", "operator", catalog.DecisionApproved, "")
	require.NoError(t, err)
	require.True(t, res.Counted)
	require.Equal(t, map[string]string{"gate": "succeeded", "after": "ready"}, statuses(t, ctx, s, r.ID))
	st, err = s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	var out struct {
		ApprovedBy []struct {
			Name    string          `json:"name"`
			Comment string          `json:"comment"`
			Input   json.RawMessage `json:"input"`
			At      time.Time       `json:"at"`
		} `json:"approved_by"`
	}
	require.NoError(t, json.Unmarshal(st.Output, &out))
	require.Len(t, out.ApprovedBy, 2)
	require.Equal(t, "alice", out.ApprovedBy[0].Name)
	require.Equal(t, "lgtm", out.ApprovedBy[0].Comment)
	require.JSONEq(t, `{"ticket":7}`, string(out.ApprovedBy[0].Input))
	require.Equal(t, "bob", out.ApprovedBy[1].Name)
	require.False(t, out.ApprovedBy[1].At.IsZero())

	// Ended: a new approver is refused, and so is a repeat, naming
	// the step's state.
	_, err = decide(ctx, s, r.ID, "carol", "operator", catalog.DecisionApproved, "")
	require.ErrorIs(t, err, catalog.ErrRunState)
	require.Contains(t, catalog.Reason(err), "succeeded")
	_, err = decide(ctx, s, r.ID, "bob", "operator", catalog.DecisionApproved, "")
	require.ErrorIs(t, err, catalog.ErrRunState)
	require.Contains(t, catalog.Reason(err), "it is succeeded")

	_, err = decide(ctx, s, r.ID, "carol", "operator", "maybe", "")
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	_, err = s.StepDecide(ctx, &catalog.StepDecision{RunID: r.ID, Key: "nope", Approver: "x", Role: "operator", Decision: catalog.DecisionApproved})
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestStepDecideReject: one rejection fails the step terminally (code rejected,
// naming who and the comment); its dependents are skipped, the run fails.
func TestStepDecideReject(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 2, Roles: []string{"operator"}})
	_, err := decide(ctx, s, r.ID, "alice", "operator", catalog.DecisionApproved, "")
	require.NoError(t, err)
	res, err := decide(ctx, s, r.ID, "bob", "operator", catalog.DecisionRejected, "not on a Friday")
	require.NoError(t, err)
	require.Equal(t, catalog.DecisionResult{Decision: catalog.DecisionRejected, Counted: true}, *res)
	require.Equal(t, map[string]string{"gate": "failed", "after": "skipped"}, statuses(t, ctx, s, r.ID))
	st, err := s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	var e map[string]any
	require.NoError(t, json.Unmarshal(st.LastError, &e))
	require.Equal(t, catalog.ErrorCodeRejected, e["code"])
	require.Equal(t, "rejected by bob: not on a Friday", e["message"])
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, r.ID).Status)
	types := eventTypes(t, ctx, s, r.ID, 0)
	require.Contains(t, types, catalog.EventStepRejected)
}

// TestStepDecideRoles: admin may always decide; roles [admin] refuses an operator.
func TestStepDecideRoles(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 1, Roles: []string{"admin"}})
	_, err := decide(ctx, s, r.ID, "olga", "operator", catalog.DecisionApproved, "")
	require.ErrorIs(t, err, catalog.ErrForbidden)
	res, err := decide(ctx, s, r.ID, "root", "admin", catalog.DecisionApproved, "")
	require.NoError(t, err)
	require.True(t, res.Counted)
	require.Equal(t, catalog.StepSucceeded, stepStatus(t, ctx, s, r.ID, "gate"))

	// A bad rule is refused at suspension.
	r2 := newRun(t, ctx, s, []catalog.NewStep{{Key: "gate", MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["gate"]
	require.ErrorIs(t, s.ApprovalSuspend(ctx, lease(c), catalog.Approval{Required: 0, Roles: []string{"operator"}}), catalog.ErrInvalidInput)
	require.ErrorIs(t, s.ApprovalSuspend(ctx, lease(c), catalog.Approval{Required: 1, Roles: []string{"viewer"}}), catalog.ErrInvalidInput)
	stale := lease(c)
	stale.Token++
	require.ErrorIs(t, s.ApprovalSuspend(ctx, stale, catalog.Approval{Required: 1, Roles: []string{"operator"}}), catalog.ErrLeaseLost)
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, r2.ID, "gate"))
}

// TestApprovalTimeout: an approval whose timeout passes with on_timeout fail fails
// (code timeout); a decision then is refused.
func TestApprovalTimeout(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 1, Roles: []string{"operator"},
		TimeoutAt: time.Now().Add(time.Hour), OnTimeout: catalog.OnTimeoutFail})
	makeDue(t, ctx, s, r.ID, "gate")
	n, err := s.WakeDue(ctx, 10)
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 1)
	require.Equal(t, map[string]string{"gate": "failed", "after": "skipped"}, statuses(t, ctx, s, r.ID))
	st, err := s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	var e map[string]any
	require.NoError(t, json.Unmarshal(st.LastError, &e))
	require.Equal(t, catalog.ErrorCodeTimeout, e["code"])
	_, err = decide(ctx, s, r.ID, "alice", "operator", catalog.DecisionApproved, "")
	require.ErrorIs(t, err, catalog.ErrRunState)
}

// TestStepDecideConcurrent: many approvers at once on a required-2 step: exactly
// two are counted, the step succeeds once with those two.
func TestStepDecideConcurrent(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 2, Roles: []string{"operator"}})
	var counted, refused atomic.Int32
	var g errgroup.Group
	for i := range 8 {
		g.Go(func() error {
			res, err := decide(ctx, s, r.ID, fmt.Sprintf("op%d", i), "operator", catalog.DecisionApproved, "")
			switch {
			case err == nil && res.Counted:
				counted.Add(1)
			case err != nil && catalog.Reason(err) != "":
				refused.Add(1)
			case err != nil:
				return err
			}
			return nil
		})
	}
	require.NoError(t, g.Wait())
	require.EqualValues(t, 2, counted.Load())
	require.EqualValues(t, 6, refused.Load())
	st, err := s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	var out struct {
		ApprovedBy []json.RawMessage `json:"approved_by"`
	}
	require.NoError(t, json.Unmarshal(st.Output, &out))
	require.Len(t, out.ApprovedBy, 2)
	n := 0
	for _, typ := range eventTypes(t, ctx, s, r.ID, 0) {
		if typ == catalog.EventStepSucceeded {
			n++
		}
	}
	require.Equal(t, 1, n)
}

// TestCallbackComplete: a step suspended for a callback ends once, by the callback
// of its own attempt; another attempt's, or a repeat, is refused.
func TestCallbackComplete(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	complete := func(runID uuid.UUID, key string, attempt int, r catalog.Resolution) error {
		t.Helper()
		buffered, err := s.CallbackComplete(ctx, runID, key, attempt, r)
		require.False(t, buffered)
		return err
	}
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["a"]
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitCallback}))
	ok := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"paid":true}`)}
	require.ErrorIs(t, complete(r.ID, "a", c.Attempt+1, ok), catalog.ErrCallbackNotWaiting)
	require.NoError(t, complete(r.ID, "a", c.Attempt, ok))
	err := complete(r.ID, "a", c.Attempt, ok)
	require.ErrorIs(t, err, catalog.ErrCallbackNotWaiting)
	require.ErrorIs(t, err, catalog.ErrRunState)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready"}, statuses(t, ctx, s, r.ID))
	require.ErrorIs(t, complete(r.ID, "zz", 1, ok), catalog.ErrNotFound)
	require.ErrorIs(t, complete(r.ID, "b", 1, ok), catalog.ErrCallbackNotWaiting, "ready: no attempt yet")

	// Failed: terminal, with the caller's error.
	r2 := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 3}})
	c2 := claimAll(t, ctx, s)["a"]
	require.NoError(t, s.StepSuspend(ctx, lease(c2), catalog.Wait{Kind: catalog.WaitCallback}))
	require.NoError(t, complete(r2.ID, "a", c2.Attempt, catalog.Resolution{Outcome: catalog.OutcomeFailed,
		Error: json.RawMessage(`{"message":"card declined","code":"declined"}`)}))
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, r2.ID).Status)
}

// TestCallbackBeforeSuspend: a callback that comes while its attempt still runs
// (the third party was quicker than the function's answer) is kept, once, and
// completes the step when it suspends; kept for an attempt that then fails, it
// does not complete the next attempt's wait.
func TestCallbackBeforeSuspend(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["a"]
	ok := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"paid":true}`)}
	buffered, err := s.CallbackComplete(ctx, r.ID, "a", c.Attempt, ok)
	require.NoError(t, err)
	require.True(t, buffered)
	_, err = s.CallbackComplete(ctx, r.ID, "a", c.Attempt, ok)
	require.ErrorIs(t, err, catalog.ErrCallbackNotWaiting, "kept once")
	require.Equal(t, "running", statuses(t, ctx, s, r.ID)["a"])
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitCallback}))
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready"}, statuses(t, ctx, s, r.ID))
	st, err := s.StepGet(ctx, r.ID, "a")
	require.NoError(t, err)
	require.JSONEq(t, `{"paid":true}`, string(st.Output))

	// Kept for attempt 1, which then fails: attempt 2's wait is its own.
	r2 := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2}})
	c1 := claimAll(t, ctx, s)["a"]
	_, err = s.CallbackComplete(ctx, r2.ID, "a", c1.Attempt, ok)
	require.NoError(t, err)
	require.NoError(t, s.StepFinish(ctx, &catalog.StepFinishParams{RunID: r2.ID, Key: "a", LeaseToken: c1.LeaseToken,
		Outcome: catalog.OutcomeFailed, Retryable: true, Error: json.RawMessage(`{"message":"crash"}`)}))
	var c2 catalog.Claimed
	require.Eventually(t, func() bool { // until the retry's backoff has passed and it is claimed
		c2 = claimAll(t, ctx, s)["a"]
		return c2.Attempt == 2
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, s.StepSuspend(ctx, lease(c2), catalog.Wait{Kind: catalog.WaitCallback}))
	require.Equal(t, "suspended", statuses(t, ctx, s, r2.ID)["a"])
}

// TestStepDecideUnnamed: a token without a name may not approve a
// step that needs more than one approver (ErrForbidden, nothing counted); it may
// approve one that needs one, and reject any.
func TestStepDecideUnnamed(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := approvalRun(t, ctx, s, catalog.Approval{Required: 2, Roles: []string{"operator"}})
	_, err := s.StepDecide(ctx, &catalog.StepDecision{RunID: r.ID, Key: "gate", Approver: "operator", Role: "operator",
		Unnamed: true, Decision: catalog.DecisionApproved})
	require.ErrorIs(t, err, catalog.ErrForbidden)
	require.Contains(t, catalog.Reason(err), "needs 2 distinct approvers")
	st, err := s.StepGet(ctx, r.ID, "gate")
	require.NoError(t, err)
	require.Zero(t, st.Approvals)
	res, err := s.StepDecide(ctx, &catalog.StepDecision{RunID: r.ID, Key: "gate", Approver: "admin", Role: "admin",
		Unnamed: true, Decision: catalog.DecisionRejected})
	require.NoError(t, err)
	require.True(t, res.Counted)
	require.Equal(t, "failed", statuses(t, ctx, s, r.ID)["gate"])

	one := approvalRun(t, ctx, s, catalog.Approval{Required: 1, Roles: []string{"operator"}})
	res, err = s.StepDecide(ctx, &catalog.StepDecision{RunID: one.ID, Key: "gate", Approver: "operator", Role: "operator",
		Unnamed: true, Decision: catalog.DecisionApproved})
	require.NoError(t, err)
	require.True(t, res.Counted)
	require.Equal(t, "succeeded", statuses(t, ctx, s, one.ID)["gate"])
}

// TestCallbackClaim: one request at a time holds a step's callback
// while it reads its body; another is refused (ErrCallbackNotWaiting, saying so)
// until the holder releases it or the claim lapses unrenewed. A step that does not
// wait for that attempt's callback cannot be claimed.
func TestCallbackClaim(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["a"]
	one, two := uuid.New(), uuid.New()

	// Running still: a callback may come before the function's answer.
	require.NoError(t, s.CallbackClaim(ctx, r.ID, "a", c.Attempt, one, time.Minute))
	err := s.CallbackClaim(ctx, r.ID, "a", c.Attempt, two, time.Minute)
	require.ErrorIs(t, err, catalog.ErrCallbackNotWaiting)
	require.Contains(t, catalog.Reason(err), "receiving another callback")
	renewed, err := s.CallbackRenew(ctx, r.ID, "a", one, time.Minute)
	require.NoError(t, err)
	require.True(t, renewed)
	require.NoError(t, s.CallbackRelease(ctx, r.ID, "a", two), "not its claim: left alone")
	require.ErrorIs(t, s.CallbackClaim(ctx, r.ID, "a", c.Attempt, two, time.Minute), catalog.ErrCallbackNotWaiting)
	require.NoError(t, s.CallbackRelease(ctx, r.ID, "a", one))
	require.NoError(t, s.CallbackClaim(ctx, r.ID, "a", c.Attempt, two, time.Minute))

	// A claim that lapsed (its server died mid-upload) goes to the next request.
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitCallback}))
	require.NoError(t, s.CallbackRelease(ctx, r.ID, "a", two))
	require.NoError(t, s.CallbackClaim(ctx, r.ID, "a", c.Attempt, one, -time.Second))
	require.NoError(t, s.CallbackClaim(ctx, r.ID, "a", c.Attempt, two, time.Minute))
	renewed, err = s.CallbackRenew(ctx, r.ID, "a", one, time.Minute)
	require.NoError(t, err)
	require.False(t, renewed, "the lapsed holder lost it")

	// Not waiting for that attempt's callback.
	err = s.CallbackClaim(ctx, r.ID, "a", c.Attempt+1, one, time.Minute)
	require.ErrorIs(t, err, catalog.ErrCallbackNotWaiting)
	require.Contains(t, catalog.Reason(err), "waiting for a callback, attempt 1")
	_, err = s.CallbackComplete(ctx, r.ID, "a", c.Attempt, catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)})
	require.NoError(t, err)
	require.NoError(t, s.CallbackRelease(ctx, r.ID, "a", two))
	err = s.CallbackClaim(ctx, r.ID, "a", c.Attempt, one, time.Minute)
	require.ErrorIs(t, err, catalog.ErrCallbackNotWaiting)
	require.Contains(t, catalog.Reason(err), "it is succeeded")
	require.ErrorIs(t, s.CallbackClaim(ctx, r.ID, "b", 1, one, time.Minute), catalog.ErrCallbackNotWaiting, "ready: no attempt yet")
	require.ErrorIs(t, s.CallbackClaim(ctx, r.ID, "zz", 1, one, time.Minute), catalog.ErrNotFound)
}
