package catalog_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

func runStatus(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) (catalog.RunStatus, catalog.PauseReason) {
	t.Helper()
	r, err := s.RunGet(ctx, id)
	require.NoError(t, err)
	var reason catalog.PauseReason
	if r.PauseReason != nil {
		reason = *r.PauseReason
	}
	require.Equal(t, r.Status == catalog.RunPaused, r.PauseReason != nil, "pause_reason is set exactly while paused")
	return r.Status, reason
}

// claimAll claims every claimable step, by key (keys of several runs collide:
// callers that claim across runs look at RunID).
func claimAll(t *testing.T, ctx context.Context, s *catalog.Store) map[string]catalog.Claimed {
	t.Helper()
	claimed, err := s.StepClaim(ctx, "d1", 100, time.Minute)
	require.NoError(t, err)
	out := map[string]catalog.Claimed{}
	for _, c := range claimed {
		out[c.Key] = c
	}
	return out
}

// lastEventData decodes the data of a run's last event.
func lastEventData(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) (catalog.EventType, map[string]any) {
	t.Helper()
	e := lastEvent(t, ctx, s, id)
	var data map[string]any
	require.NoError(t, json.Unmarshal(e.Data, &data))
	return e.Type, data
}

// TestRunPauseResumeStates: pause and resume from every run state.
func TestRunPauseResumeStates(t *testing.T) {
	t.Parallel()
	// makeRun brings a run a → b (one attempt each) to a state.
	type state func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID)
	claimA := func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
		claimKeys(t, ctx, s, "d1", 1)
	}
	states := map[catalog.RunStatus]state{
		catalog.RunPending: func(*testing.T, context.Context, *catalog.Store, uuid.UUID) {},
		catalog.RunRunning: claimA,
		catalog.RunPaused: func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
			claimA(t, ctx, s, id)
			_, err := s.RunPause(ctx, id, "alice", "")
			require.NoError(t, err)
		},
		catalog.RunSucceeded: func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
			for range 2 {
				c := claimKeys(t, ctx, s, "d1", 1)
				for _, c := range c {
					require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeSucceeded, false, 0)))
				}
			}
		},
		catalog.RunFailed: func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
			c := claimKeys(t, ctx, s, "d1", 1)["a"]
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeFailed, false, 0)))
		},
		catalog.RunCanceled: func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
			require.NoError(t, s.RunCancel(ctx, id, ""))
		},
	}
	tests := []struct {
		name   string
		from   catalog.RunStatus
		resume bool // resume instead of pause
		// wantErr, or the state after and whether it changed (wrote an event).
		wantErr     error
		wantStatus  catalog.RunStatus
		wantChanged bool
	}{
		{name: "pause pending", from: catalog.RunPending, wantStatus: catalog.RunPaused, wantChanged: true},
		{name: "pause running", from: catalog.RunRunning, wantStatus: catalog.RunPaused, wantChanged: true},
		{name: "pause paused", from: catalog.RunPaused, wantStatus: catalog.RunPaused, wantChanged: false},
		{name: "pause succeeded", from: catalog.RunSucceeded, wantErr: catalog.ErrRunState},
		{name: "pause failed", from: catalog.RunFailed, wantErr: catalog.ErrRunState},
		{name: "pause canceled", from: catalog.RunCanceled, wantErr: catalog.ErrRunState},
		{name: "resume pending", from: catalog.RunPending, resume: true, wantErr: catalog.ErrRunState},
		{name: "resume running", from: catalog.RunRunning, resume: true, wantErr: catalog.ErrRunState},
		{name: "resume paused", from: catalog.RunPaused, resume: true, wantStatus: catalog.RunRunning, wantChanged: true},
		{name: "resume succeeded", from: catalog.RunSucceeded, resume: true, wantErr: catalog.ErrRunState},
		{name: "resume failed", from: catalog.RunFailed, resume: true, wantErr: catalog.ErrRunState},
		{name: "resume canceled", from: catalog.RunCanceled, resume: true, wantErr: catalog.ErrRunState},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
			states[tt.from](t, ctx, s, r.ID)
			got, _ := runStatus(t, ctx, s, r.ID)
			require.Equal(t, tt.from, got, "the run is in the state the case starts from")
			before := lastEvent(t, ctx, s, r.ID)

			var err error
			changed := true
			if tt.resume {
				err = s.RunResume(ctx, r.ID, "bob", "fixed")
			} else {
				changed, err = s.RunPause(ctx, r.ID, "bob", "looking")
			}
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorIs(t, err, catalog.ErrConflict)
				require.Contains(t, catalog.Reason(err), string(tt.from), "the reason names the run's state")
				got, _ := runStatus(t, ctx, s, r.ID)
				require.Equal(t, tt.from, got, "nothing changed")
				require.Equal(t, before.Seq, lastEvent(t, ctx, s, r.ID).Seq, "no event")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantChanged, changed)
			got, reason := runStatus(t, ctx, s, r.ID)
			require.Equal(t, tt.wantStatus, got)
			if !tt.wantChanged {
				require.Equal(t, before.Seq, lastEvent(t, ctx, s, r.ID).Seq, "no second event")
				return
			}
			typ, data := lastEventData(t, ctx, s, r.ID)
			if tt.resume {
				require.Equal(t, catalog.EventRunResumed, typ)
				require.Equal(t, map[string]any{"actor": "bob", "reason": "fixed", "pause_reason": "run"}, data)
				return
			}
			require.Equal(t, catalog.PauseRun, reason)
			require.Equal(t, catalog.EventRunPaused, typ)
			require.Equal(t, map[string]any{"actor": "bob", "reason": "looking", "pause_reason": "run"}, data)
		})
	}

	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		ctx, tb := setup(t)
		_, err := tb.store.RunPause(ctx, uuid.New(), "bob", "")
		require.ErrorIs(t, err, catalog.ErrNotFound)
		require.ErrorIs(t, tb.store.RunResume(ctx, uuid.New(), "bob", ""), catalog.ErrNotFound)
	})

	// A run paused before any step started goes back to pending.
	t.Run("resume a run that never started", func(t *testing.T) {
		t.Parallel()
		ctx, tb := setup(t)
		s := tb.store
		r := newRun(t, ctx, s, diamond(1))
		_, err := s.RunPause(ctx, r.ID, "bob", "")
		require.NoError(t, err)
		claimKeys(t, ctx, s, "d1", 0)
		require.NoError(t, s.RunResume(ctx, r.ID, "bob", ""))
		got, _ := runStatus(t, ctx, s, r.ID)
		require.Equal(t, catalog.RunPending, got)
		claimKeys(t, ctx, s, "d1", 1)
	})
}

// TestPausedRunStartsNothing: a paused run's steps are not claimed, whatever their
// state; the attempt running at the pause finishes and is recorded, and what it
// makes ready waits, as does its retry; resume releases them all.
func TestPausedRunStartsNothing(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	// a → (b, c) → d, and e beside them; a retries once.
	r := newRun(t, ctx, s, append(diamond(2), catalog.NewStep{Key: "e", MaxAttempts: 2}))
	other := newRun(t, ctx, s, []catalog.NewStep{{Key: "x", MaxAttempts: 1}})
	got, err := s.StepClaim(ctx, "d1", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)
	_, err = s.RunPause(ctx, r.ID, "bob", "")
	require.NoError(t, err)

	// Only the other run's step is claimable.
	for _, c := range claimAll(t, ctx, s) {
		require.Equal(t, other.ID, c.RunID, "no step of the paused run is claimed")
	}
	steps, err := s.StepList(ctx, r.ID)
	require.NoError(t, err)
	for _, st := range steps {
		require.True(t, st.Held, "step %s is held", st.Key)
	}

	// The running attempt of a finishes: b and c are ready, held.
	a := got[0]
	require.Equal(t, r.ID, a.RunID, "the older run's step is claimed first")
	require.Equal(t, "a", a.Key)
	require.NoError(t, s.StepFinish(ctx, finishParams(a, catalog.OutcomeSucceeded, false, 0)))
	require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "b"))
	claimKeys(t, ctx, s, "d1", 0)
	st, _ := runStatus(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunPaused, st)

	require.NoError(t, s.RunResume(ctx, r.ID, "bob", ""))
	st, _ = runStatus(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunRunning, st)
	resumed := claimAll(t, ctx, s)
	require.Contains(t, resumed, "b")
	require.Contains(t, resumed, "c")

	// A retry of an attempt that ends while paused waits too.
	_, err = s.RunPause(ctx, r.ID, "bob", "")
	require.NoError(t, err)
	require.NoError(t, s.StepFinish(ctx, finishParams(resumed["b"], catalog.OutcomeFailed, true, 0)))
	require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "b"))
	claimKeys(t, ctx, s, "d1", 0)
	require.NoError(t, s.RunResume(ctx, r.ID, "bob", ""))
	require.Equal(t, 2, claimAll(t, ctx, s)["b"].Attempt)
}

// TestPausedRunEnds: a paused run ends when its last steps finish (settle), and a
// paused run can be canceled; neither leaves a step held.
func TestPausedRunEnds(t *testing.T) {
	t.Parallel()
	for _, outcome := range []catalog.Outcome{catalog.OutcomeSucceeded, catalog.OutcomeFailed} {
		t.Run("settle, last step "+string(outcome), func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
			a := claimKeys(t, ctx, s, "d1", 1)["a"]
			_, err := s.RunPause(ctx, r.ID, "bob", "")
			require.NoError(t, err)
			require.NoError(t, s.StepFinish(ctx, finishParams(a, outcome, false, 0)))
			want := map[catalog.Outcome]catalog.RunStatus{catalog.OutcomeSucceeded: catalog.RunSucceeded, catalog.OutcomeFailed: catalog.RunFailed}[outcome]
			got, _ := runStatus(t, ctx, s, r.ID)
			require.Equal(t, want, got)
			st, err := s.StepGet(ctx, r.ID, "a")
			require.NoError(t, err)
			require.False(t, st.Held, "the run ended: nothing is held")
		})
	}
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		ctx, tb := setup(t)
		s := tb.store
		r := newRun(t, ctx, s, diamond(1))
		a := claimKeys(t, ctx, s, "d1", 1)["a"]
		_, err := s.RunPause(ctx, r.ID, "bob", "")
		require.NoError(t, err)
		require.NoError(t, s.RunCancel(ctx, r.ID, "no"))
		got, _ := runStatus(t, ctx, s, r.ID)
		require.Equal(t, catalog.RunCanceled, got)
		require.Equal(t, map[string]string{"a": "canceled", "b": "canceled", "c": "canceled", "d": "canceled"}, statuses(t, ctx, s, r.ID))
		steps, err := s.StepList(ctx, r.ID)
		require.NoError(t, err)
		for _, st := range steps {
			require.False(t, st.Held)
		}
		require.ErrorIs(t, finish(t, ctx, s, a, catalog.OutcomeSucceeded, false, `1`), catalog.ErrLeaseLost)
	})
}

// TestOnExhausted: a step that would fail fails its run with on_exhausted: fail,
// and parks with pause: ready, held, a fresh attempt budget, the run paused
// (exhausted) with a run.paused event naming the step and its error; resume runs it
// again.
func TestOnExhausted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		onExhausted catalog.OnExhausted
		retryable   bool
		wantRun     catalog.RunStatus
	}{
		{name: "fail, attempts used up", onExhausted: catalog.OnExhaustedFail, retryable: true, wantRun: catalog.RunFailed},
		{name: "default is fail", retryable: true, wantRun: catalog.RunFailed},
		{name: "pause, attempts used up", onExhausted: catalog.OnExhaustedPause, retryable: true, wantRun: catalog.RunPaused},
		{name: "pause, not retryable", onExhausted: catalog.OnExhaustedPause, wantRun: catalog.RunPaused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2, OnExhausted: tt.onExhausted},
				{Key: "b", Needs: []string{"a"}, MaxAttempts: 1}, {Key: "c", MaxAttempts: 1}})
			claimed := claimKeys(t, ctx, s, "d1", 2)
			c := claimed["a"]
			if tt.retryable {
				require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeFailed, true, 0)))
				c = claimKeys(t, ctx, s, "d1", 1)["a"]
			}
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeFailed, tt.retryable, 0)))
			got, reason := runStatus(t, ctx, s, r.ID)
			if tt.wantRun == catalog.RunFailed {
				require.NoError(t, s.StepFinish(ctx, finishParams(claimed["c"], catalog.OutcomeSucceeded, false, 0)))
				got, _ = runStatus(t, ctx, s, r.ID)
				require.Equal(t, catalog.RunFailed, got)
				require.Equal(t, map[string]string{"a": "failed", "b": "skipped", "c": "succeeded"}, statuses(t, ctx, s, r.ID))
				return
			}
			require.Equal(t, catalog.RunPaused, got)
			require.Equal(t, catalog.PauseExhausted, reason)
			a, err := s.StepGet(ctx, r.ID, "a")
			require.NoError(t, err)
			require.Equal(t, catalog.StepReady, a.Status)
			require.True(t, a.Held)
			require.Zero(t, a.CountedAttempts, "a fresh attempt budget")
			require.JSONEq(t, `{"message":"boom"}`, string(a.LastError))
			require.Nil(t, a.FinishedAt)
			at, err := s.AttemptGet(ctx, r.ID, "a", a.Attempts)
			require.NoError(t, err)
			require.Equal(t, catalog.AttemptFailed, at.Status)
			e := lastEvent(t, ctx, s, r.ID)
			require.Equal(t, catalog.EventRunPaused, e.Type)
			require.Equal(t, "a", e.StepKey)
			require.Equal(t, a.Attempts, e.Attempt)
			require.JSONEq(t, `{"pause_reason":"exhausted","step":"a","attempt_status":"failed","error":{"message":"boom"}}`, string(e.Data))
			require.Equal(t, map[string]string{"a": "ready", "b": "waiting", "c": "running"}, statuses(t, ctx, s, r.ID))

			// Nothing starts; c, running, finishes; the run stays paused.
			claimKeys(t, ctx, s, "d1", 0)
			require.NoError(t, s.StepFinish(ctx, finishParams(claimed["c"], catalog.OutcomeSucceeded, false, 0)))
			got, _ = runStatus(t, ctx, s, r.ID)
			require.Equal(t, catalog.RunPaused, got)
			// The workflow's resume does not release it.
			_, err = s.WorkflowResume(ctx, "wf", "bob", "")
			require.NoError(t, err)
			got, _ = runStatus(t, ctx, s, r.ID)
			require.Equal(t, catalog.RunPaused, got)

			// An operator resumes: a runs again, with its whole budget, and succeeds.
			require.NoError(t, s.RunResume(ctx, r.ID, "bob", "fixed"))
			c = claimKeys(t, ctx, s, "d1", 1)["a"]
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeFailed, true, 0)))
			require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "a"), "the fresh budget has a retry left")
			c = claimKeys(t, ctx, s, "d1", 1)["a"]
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeSucceeded, false, 0)))
			b := claimKeys(t, ctx, s, "d1", 1)["b"]
			require.NoError(t, s.StepFinish(ctx, finishParams(b, catalog.OutcomeSucceeded, false, 0)))
			got, _ = runStatus(t, ctx, s, r.ID)
			require.Equal(t, catalog.RunSucceeded, got)
		})
	}
}

// TestWorkflowPause: pausing a workflow pauses its unfinished runs, not another
// workflow's; new runs are created paused; resume releases the runs the workflow
// held, not those an operator paused (before or after) or a step parked.
func TestWorkflowPause(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	one := []catalog.NewStep{{Key: "a", MaxAttempts: 1}}
	v := catalogtest.Version(t, s, "wf", one...)
	otherV := catalogtest.Version(t, s, "other", one...)
	start := func(wf string, version int) uuid.UUID {
		t.Helper()
		r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: wf, Version: version})
		require.NoError(t, err)
		return r.ID
	}
	running, handedBack, byOperator, done := start("wf", v.Version), start("wf", v.Version), start("wf", v.Version), start("wf", v.Version)
	otherRun := start("other", otherV.Version)
	claimed, err := s.StepClaim(ctx, "d1", 100, time.Minute)
	require.NoError(t, err)
	for _, c := range claimed {
		switch c.RunID {
		case done:
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeSucceeded, false, 0)))
		case handedBack:
			require.NoError(t, s.StepFinish(ctx, finishParams(c, catalog.OutcomeHandback, false, 0)))
		}
	}
	_, err = s.RunPause(ctx, byOperator, "alice", "")
	require.NoError(t, err)
	// A run that never started.
	pending := start("wf", v.Version)

	n, err := s.WorkflowPause(ctx, "wf", "bob", "deploy in progress")
	require.NoError(t, err)
	require.Equal(t, 3, n, "running, handedBack and pending")
	w, err := s.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.True(t, w.Paused)
	require.Equal(t, "bob", *w.PausedBy)
	require.NotNil(t, w.PausedAt)
	for id, want := range map[uuid.UUID]catalog.PauseReason{running: catalog.PauseWorkflow, handedBack: catalog.PauseWorkflow,
		pending: catalog.PauseWorkflow, byOperator: catalog.PauseRun} {
		st, reason := runStatus(t, ctx, s, id)
		require.Equal(t, catalog.RunPaused, st)
		require.Equal(t, want, reason)
	}
	typ, data := lastEventData(t, ctx, s, running)
	require.Equal(t, catalog.EventRunPaused, typ)
	require.Equal(t, map[string]any{"actor": "bob", "reason": "deploy in progress", "pause_reason": "workflow"}, data)
	st, _ := runStatus(t, ctx, s, done)
	require.Equal(t, catalog.RunSucceeded, st)
	st, _ = runStatus(t, ctx, s, otherRun)
	require.Equal(t, catalog.RunRunning, st, "another workflow's run")

	// Pausing again changes nothing and keeps who paused it.
	n, err = s.WorkflowPause(ctx, "wf", "carol", "")
	require.NoError(t, err)
	require.Zero(t, n)
	w, err = s.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, "bob", *w.PausedBy)

	// A new run waits.
	created := start("wf", v.Version)
	st, reason := runStatus(t, ctx, s, created)
	require.Equal(t, catalog.RunPaused, st)
	require.Equal(t, catalog.PauseWorkflow, reason)
	claimKeys(t, ctx, s, "d1", 0)

	// An operator pauses a workflow-paused run: from then on it is theirs.
	changed, err := s.RunPause(ctx, running, "alice", "")
	require.NoError(t, err)
	require.True(t, changed)
	_, reason = runStatus(t, ctx, s, running)
	require.Equal(t, catalog.PauseRun, reason)

	n, err = s.WorkflowResume(ctx, "wf", "bob", "")
	require.NoError(t, err)
	require.Equal(t, 3, n, "handedBack, pending and the new run")
	w, err = s.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.False(t, w.Paused)
	require.Nil(t, w.PausedBy)
	for id, want := range map[uuid.UUID]catalog.RunStatus{handedBack: catalog.RunRunning, pending: catalog.RunPending, created: catalog.RunPending,
		running: catalog.RunPaused, byOperator: catalog.RunPaused} {
		st, _ := runStatus(t, ctx, s, id)
		require.Equal(t, want, st, "run %s", id)
	}
	claimKeys(t, ctx, s, "d1", 3) // a of each of the three (keyed by a: they collide)
	n, err = s.WorkflowResume(ctx, "wf", "bob", "")
	require.NoError(t, err)
	require.Zero(t, n, "resuming a workflow that is not paused changes nothing")

	_, err = s.WorkflowPause(ctx, "nope", "bob", "")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.WorkflowResume(ctx, "nope", "bob", "")
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestClaimUsesItsIndex: the claim reads ready steps through steps_claim_idx,
// which leaves held steps out.
func TestClaimUsesItsIndex(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	// One connection: the setting is the session's. (A test database is small;
	// without it the planner may prefer reading the table.)
	conn, err := tb.store.DB().Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET enable_seqscan = off`)
	require.NoError(t, err)
	var plan []string
	require.NoError(t, conn.SelectContext(ctx, &plan, `EXPLAIN SELECT s.run_id, s.key FROM steps s
    WHERE s.status = 'ready' AND NOT s.held AND s.ready_at <= now()
    ORDER BY s.ready_at LIMIT 10 FOR UPDATE SKIP LOCKED`))
	require.Contains(t, strings.Join(plan, "\n"), "steps_claim_idx")
}
