package catalog_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// childSetup registers a parent workflow (one step, call) and a child workflow
// (a → b), starts a parent run and claims its step: the lease to start the child
// with, and the child's version.
func childSetup(t *testing.T, ctx context.Context, s *catalog.Store) (parent *catalog.Run, call catalog.Claimed, kid int) {
	t.Helper()
	kid = catalogtest.Version(t, s, "kid", catalog.NewStep{Key: "a", MaxAttempts: 1},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1}).Version
	pv := catalogtest.Version(t, s, "parent", catalog.NewStep{Key: "call", MaxAttempts: 1})
	parent, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "parent", Version: pv.Version})
	require.NoError(t, err)
	call = claimKeys(t, ctx, s, "d1", 1)["call"]
	return parent, call, kid
}

// TestChildRunSucceeds: a workflow step starts its child and suspends, fenced by its
// lease; the child's end gives the step the child's sink outputs, and the parent
// run ends.
func TestChildRunSucceeds(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	parent, call, kid := childSetup(t, ctx, s)

	stale := lease(call)
	stale.Token++
	_, err := s.ChildStart(ctx, stale, &catalog.ChildStartParams{Workflow: "kid", Version: kid})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
	var children int
	require.NoError(t, s.DB().GetContext(ctx, &children, `SELECT count(*) FROM runs WHERE parent_id = $1`, parent.ID))
	require.Zero(t, children, "a lost lease starts no child")

	res, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid,
		Input: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	require.False(t, res.Retried)
	child := runOf(t, ctx, s, res.Run)
	require.Equal(t, parent.ID, *child.ParentID)
	require.Equal(t, "call", *child.ParentStep)
	require.JSONEq(t, `{"n":1}`, string(child.Input))
	st, err := s.StepGet(ctx, parent.ID, "call")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Equal(t, catalog.WaitChildRun, *st.WaitKind)
	require.Equal(t, res.Run, *st.ChildRun)
	require.Nil(t, st.LeaseToken)
	typ, data := lastEventData(t, ctx, s, parent.ID)
	require.Equal(t, catalog.EventStepSuspended, typ)
	require.Equal(t, "child_run", data["kind"])
	require.Equal(t, res.Run.String(), data["run_id"])

	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"], catalog.OutcomeSucceeded, false, `{"a":1}`))
	require.Equal(t, catalog.StepSuspended, stepStatus(t, ctx, s, parent.ID, "call"))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["b"], catalog.OutcomeSucceeded, false, `{"b":2}`))

	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, res.Run).Status)
	st, err = s.StepGet(ctx, parent.ID, "call")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.JSONEq(t, `{"b":{"b":2}}`, string(st.Output), "the child's output: its sink steps' outputs by key")
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, parent.ID).Status)
}

// TestChildRunFails: a child's failure fails the parent step (code child_failed,
// with the child's error); retrying the parent retries that child (keeping its
// succeeded steps) instead of starting another.
func TestChildRunFails(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	parent, call, kid := childSetup(t, ctx, s)
	res, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid})
	require.NoError(t, err)
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"], catalog.OutcomeSucceeded, false, `{}`))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["b"], catalog.OutcomeFailed, false, ""))

	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, res.Run).Status)
	st, err := s.StepGet(ctx, parent.ID, "call")
	require.NoError(t, err)
	require.Equal(t, catalog.StepFailed, st.Status)
	var stepErr struct {
		Code  string          `json:"code"`
		RunID string          `json:"run_id"`
		Cause json.RawMessage `json:"cause"`
	}
	require.NoError(t, json.Unmarshal(st.LastError, &stepErr))
	require.Equal(t, "child_failed", stepErr.Code)
	require.Equal(t, res.Run.String(), stepErr.RunID)
	require.Contains(t, string(stepErr.Cause), "step b failed")
	pr := runOf(t, ctx, s, parent.ID)
	require.Equal(t, catalog.RunFailed, pr.Status)

	// Retry the parent: its step runs again and takes up the same child.
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: parent.ID, Actor: "op"})
	require.NoError(t, err)
	call = claimKeys(t, ctx, s, "d1", 1)["call"]
	again, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid})
	require.NoError(t, err)
	require.True(t, again.Retried)
	require.Equal(t, res.Run, again.Run)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready"}, statuses(t, ctx, s, res.Run))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["b"], catalog.OutcomeSucceeded, false, `{"ok":true}`))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, parent.ID).Status)
}

// TestChildRunFollowsParent: canceling, pausing and resuming the parent reach the
// child.
func TestChildRunFollowsParent(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	parent, call, kid := childSetup(t, ctx, s)
	res, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid})
	require.NoError(t, err)

	_, err = s.RunPause(ctx, parent.ID, "alice", "hold on")
	require.NoError(t, err)
	child := runOf(t, ctx, s, res.Run)
	require.Equal(t, catalog.RunPaused, child.Status)
	require.Equal(t, catalog.PauseRun, *child.PauseReason)
	require.NoError(t, s.RunResume(ctx, parent.ID, "alice", ""))
	require.Equal(t, catalog.RunPending, runOf(t, ctx, s, res.Run).Status)

	// A child paused by its own operator stays paused when the parent resumes.
	_, err = s.RunPause(ctx, res.Run, "bob", "")
	require.NoError(t, err)
	_, err = s.RunPause(ctx, parent.ID, "alice", "")
	require.NoError(t, err)
	require.NoError(t, s.RunResume(ctx, parent.ID, "alice", ""))
	require.Equal(t, catalog.RunPaused, runOf(t, ctx, s, res.Run).Status)
	require.NoError(t, s.RunResume(ctx, res.Run, "bob", ""))

	require.NoError(t, s.RunCancel(ctx, parent.ID, "stop"))
	child = runOf(t, ctx, s, res.Run)
	require.Equal(t, catalog.RunCanceled, child.Status)
	require.Contains(t, string(child.Error), "parent run "+parent.ID.String()+" canceled")
	require.Equal(t, catalog.StepCanceled, stepStatus(t, ctx, s, parent.ID, "call"))
	require.Equal(t, catalog.RunCanceled, runOf(t, ctx, s, parent.ID).Status)
}

// TestChildRunLimits: depth and fan-out bounds, and a child workflow that does not
// exist; each writes nothing.
func TestChildRunLimits(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	parent, call, kid := childSetup(t, ctx, s)

	_, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "nope"})
	require.ErrorIs(t, err, catalog.ErrChildNotFound)
	_, err = s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Alias: "stable"})
	require.ErrorIs(t, err, catalog.ErrChildNotFound)
	_, err = s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid + 10})
	require.ErrorIs(t, err, catalog.ErrChildNotFound)
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, parent.ID, "call"))

	// The parent is itself a child (depth 1): its child would be at depth 2.
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET parent_id = $1 WHERE id = $2`, mustRun(t, ctx, s, kid), parent.ID)
	require.NoError(t, err)
	_, err = s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid, MaxDepth: 1})
	require.ErrorIs(t, err, catalog.ErrChildLimit)
	require.ErrorContains(t, err, "2 levels deep, over the limit of 1")

	// Fan-out: a run that started its limit of children starts no more.
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET parent_id = $1, parent_step = 'other' WHERE id = $2`,
		parent.ID, mustRun(t, ctx, s, kid))
	require.NoError(t, err)
	_, err = s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid, MaxChildren: 1})
	require.ErrorIs(t, err, catalog.ErrChildLimit)
	require.ErrorContains(t, err, "has started 1 child runs")
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, parent.ID, "call"))

	_, err = s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid, MaxDepth: 2, MaxChildren: 2})
	require.NoError(t, err)
}

func mustRun(t *testing.T, ctx context.Context, s *catalog.Store, kid int) uuid.UUID {
	t.Helper()
	r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "kid", Version: kid})
	require.NoError(t, err)
	return r.ID
}

// TestChildRunTreeLimit: child runs were bounded per run and by
// depth only, so a workflow that starts itself twice grew its tree exponentially.
// MaxTreeRuns bounds a tree's child runs at every depth, counted at the root: a
// child over it is ErrChildLimit naming the root and CAIRN_MAX_TREE_RUNS, and
// nothing is written (the count included). A tree grown before the count existed
// is counted from its runs.
func TestChildRunTreeLimit(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	root, call, kid := childSetup(t, ctx, s)
	treeRuns := func() int {
		t.Helper()
		var n int
		require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT runs FROM run_trees WHERE root_id = $1`, root.ID))
		return n
	}
	p := &catalog.ChildStartParams{Workflow: "kid", Version: kid, MaxTreeRuns: 2}

	child, err := s.ChildStart(ctx, lease(call), p)
	require.NoError(t, err)
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	require.Equal(t, child.Run, a.RunID)
	grandchild, err := s.ChildStart(ctx, lease(a), p)
	require.NoError(t, err, "two runs below the root: the limit")
	require.Equal(t, 2, treeRuns())

	ga := claimKeys(t, ctx, s, "d1", 1)["a"]
	require.Equal(t, grandchild.Run, ga.RunID)
	_, err = s.ChildStart(ctx, lease(ga), p)
	require.ErrorIs(t, err, catalog.ErrChildLimit)
	require.ErrorContains(t, err, "the runs below run "+root.ID.String()+" have started 2 child runs in all")
	require.ErrorContains(t, err, "CAIRN_MAX_TREE_RUNS")
	require.Equal(t, 2, treeRuns(), "a refused child is not counted")
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, ga.RunID, "a"))

	// A tree that grew before run_trees: counted from its runs.
	_, err = s.DB().ExecContext(ctx, `DELETE FROM run_trees`)
	require.NoError(t, err)
	_, err = s.ChildStart(ctx, lease(ga), p)
	require.ErrorIs(t, err, catalog.ErrChildLimit)
	p.MaxTreeRuns = 3
	_, err = s.ChildStart(ctx, lease(ga), p)
	require.NoError(t, err)
	require.Equal(t, 3, treeRuns())
}

// TestChildEndsWhileParentBusy: a child run that ends while its parent's row is
// locked by another transaction does not wait for it (a finisher that waited there
// met claims in a circle): its end is left to the wake sweeper, which resolves the
// parent's step once the parent is free, with the child's output.
func TestChildEndsWhileParentBusy(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	parent, call, kid := childSetup(t, ctx, s)
	res, err := s.ChildStart(ctx, lease(call), &catalog.ChildStartParams{Workflow: "kid", Version: kid})
	require.NoError(t, err)
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"], catalog.OutcomeSucceeded, false, `{"a":1}`))

	busy, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer busy.Rollback() //nolint:errcheck // rolled back below; a second rollback is a no-op
	_, err = busy.ExecContext(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE`, parent.ID)
	require.NoError(t, err)
	// The finish does not wait for the parent (the bound only keeps a waiting
	// finish from hanging the test: it fails it).
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, finish(t, fctx, s, claimKeys(t, ctx, s, "d1", 1)["b"], catalog.OutcomeSucceeded, false, `{"b":2}`))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, res.Run).Status)
	require.Equal(t, catalog.StepSuspended, stepStatus(t, ctx, s, parent.ID, "call"), "left to the sweeper")
	next, err := s.NextWake(ctx)
	require.NoError(t, err)
	require.False(t, next.IsZero(), "the sweeper is told to look")

	require.NoError(t, busy.Rollback())
	n, err := s.WakeDue(ctx, 10)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	st, err := s.StepGet(ctx, parent.ID, "call")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSucceeded, st.Status)
	require.JSONEq(t, `{"b":{"b":2}}`, string(st.Output))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, parent.ID).Status)
	next, err = s.NextWake(ctx)
	require.NoError(t, err)
	require.True(t, next.IsZero(), "nothing left for the sweeper")
}
