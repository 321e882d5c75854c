package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// chain is the layout 1 → 2 → … → n with steps s1…sn, one attempt each.
func chain(n int) []catalog.NewStep {
	var out []catalog.NewStep
	for i := 1; i <= n; i++ {
		st := catalog.NewStep{Key: fmt.Sprintf("s%d", i), MaxAttempts: 1}
		if i > 1 {
			st.Needs = []string{fmt.Sprintf("s%d", i-1)}
		}
		out = append(out, st)
	}
	return out
}

// drive claims and finishes ready steps until none is left: a step whose key is in
// fail fails (not retryable), the others succeed with the output {"step": key}.
func drive(t *testing.T, ctx context.Context, s *catalog.Store, fail ...string) {
	t.Helper()
	for range 100 {
		claimed, err := s.StepClaim(ctx, "d1", 100, time.Minute)
		require.NoError(t, err)
		if len(claimed) == 0 {
			return
		}
		for _, c := range claimed {
			p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
				Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"step":"` + c.Key + `"}`)}
			for _, f := range fail {
				if f == c.Key {
					p = &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
						Outcome: catalog.OutcomeFailed, Error: json.RawMessage(`{"message":"boom"}`)}
				}
			}
			require.NoError(t, s.StepFinish(ctx, p))
		}
	}
	t.Fatal("the run did not settle in 100 rounds")
}

func getRun(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) *catalog.Run {
	t.Helper()
	r, err := s.RunGet(ctx, id)
	require.NoError(t, err)
	return r
}

func steps(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) map[string]catalog.Step {
	t.Helper()
	list, err := s.StepList(ctx, id)
	require.NoError(t, err)
	out := map[string]catalog.Step{}
	for _, st := range list {
		out[st.Key] = st
	}
	return out
}

func retry(ctx context.Context, s *catalog.Store, id uuid.UUID, version int) (*catalog.Run, error) {
	r, _, err := s.RunRetry(ctx, &catalog.RunRetryParams{RunID: id, Version: version, Actor: "alice"})
	return r, err
}

// TestRunRetryStates: only a failed or canceled run is retried; any other state is
// ErrRunState naming it, an unknown run ErrNotFound, and a refusal writes nothing.
func TestRunRetryStates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID)
		wantErr error
		// want is the run's state after the retry.
		want catalog.RunStatus
	}{
		{name: "pending", prepare: func(*testing.T, context.Context, *catalog.Store, uuid.UUID) {},
			wantErr: catalog.ErrRunState, want: catalog.RunPending},
		{name: "running", prepare: func(t *testing.T, ctx context.Context, s *catalog.Store, _ uuid.UUID) {
			claimKeys(t, ctx, s, "d1", 1)
		}, wantErr: catalog.ErrRunState, want: catalog.RunRunning},
		{name: "succeeded", prepare: func(t *testing.T, ctx context.Context, s *catalog.Store, _ uuid.UUID) {
			drive(t, ctx, s)
		}, wantErr: catalog.ErrRunState, want: catalog.RunSucceeded},
		{name: "failed", prepare: func(t *testing.T, ctx context.Context, s *catalog.Store, _ uuid.UUID) {
			drive(t, ctx, s, "b")
		}, want: catalog.RunRunning},
		// Canceled before any step started: pending again.
		{name: "canceled", prepare: func(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
			require.NoError(t, s.RunCancel(ctx, id, "stop"))
		}, want: catalog.RunPending},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, diamond(1))
			tt.prepare(t, ctx, s, r.ID)
			before := getRun(t, ctx, s, r.ID)
			got, err := retry(ctx, s, r.ID, 0)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorIs(t, err, catalog.ErrConflict)
				require.Contains(t, catalog.Reason(err), "is "+string(before.Status)+": only a failed or canceled run can be retried")
				require.Equal(t, before.Revision, getRun(t, ctx, s, r.ID).Revision, "nothing written")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got.Status)
			require.Nil(t, got.FinishedAt)
			require.Nil(t, got.Error)
			require.Equal(t, catalog.EventRunRetried, lastEvent(t, ctx, s, r.ID).Type)
		})
	}
	t.Run("unknown run", func(t *testing.T) {
		t.Parallel()
		ctx, tb := setup(t)
		_, err := retry(ctx, tb.store, uuid.New(), 0)
		require.ErrorIs(t, err, catalog.ErrNotFound)
	})
}

// TestRunRetryKeepsSucceededSteps: a 5-step chain whose step 4 failed is retried:
// steps 1–3 keep their single attempt and output, 4 runs again with a fresh budget
// and its checkpoint (attempt numbers go on), 5 follows, and the run succeeds.
func TestRunRetryKeepsSucceededSteps(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, chain(5))
	for _, key := range []string{"s1", "s2", "s3"} {
		require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)[key], catalog.OutcomeSucceeded, false, `{"step":"`+key+`"}`))
	}
	c4 := claimKeys(t, ctx, s, "d1", 1)["s4"]
	require.NoError(t, s.StepCheckpoint(ctx, catalog.Lease{RunID: r.ID, Key: "s4", Token: c4.LeaseToken}, json.RawMessage(`{"at":7}`), nil))
	require.NoError(t, finish(t, ctx, s, c4, catalog.OutcomeFailed, false, ""))
	failed := getRun(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunFailed, failed.Status)
	require.Equal(t, map[string]string{"s1": "succeeded", "s2": "succeeded", "s3": "succeeded", "s4": "failed", "s5": "skipped"},
		statuses(t, ctx, s, r.ID))
	before := steps(t, ctx, s, r.ID)

	got, retried, err := s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Actor: "alice"})
	require.NoError(t, err)
	require.True(t, retried)
	require.Equal(t, catalog.RunRunning, got.Status, "steps of it started before")
	require.Nil(t, got.Error)
	require.Nil(t, got.FinishedAt)
	require.Equal(t, 2, got.StepsRemaining)
	require.Equal(t, 5, got.StepsTotal)
	after := steps(t, ctx, s, r.ID)
	for _, key := range []string{"s1", "s2", "s3"} {
		require.Equal(t, before[key], after[key], "kept step %s is untouched", key)
	}
	s4 := after["s4"]
	require.Equal(t, catalog.StepReady, s4.Status)
	require.Equal(t, 1, s4.Attempts, "attempt numbers go on")
	require.Zero(t, s4.CountedAttempts, "a fresh budget")
	require.Nil(t, s4.FinishedAt)
	require.JSONEq(t, `{"at":7}`, string(s4.Checkpoint), "the checkpoint is kept")
	s5 := after["s5"]
	require.Equal(t, catalog.StepWaiting, s5.Status)
	require.Equal(t, 1, s5.DepsRemaining)
	require.Nil(t, s5.LastError, "the skip's error is gone")

	e := lastEvent(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventRunRetried, e.Type)
	require.JSONEq(t, `{"actor":"alice","version":1,"previous_version":1,"steps":["s4","s5"],"try":2}`, string(e.Data))
	require.Equal(t, got.Revision, e.Seq)

	// s4 resumes from its checkpoint as attempt 2; then s5; the run succeeds.
	c := claimKeys(t, ctx, s, "d1", 1)["s4"]
	require.Equal(t, 2, c.Attempt)
	require.JSONEq(t, `{"at":7}`, string(c.Checkpoint))
	require.JSONEq(t, `{"s3":{"step":"s3"}}`, string(c.Deps))
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `{"step":"s4"}`))
	drive(t, ctx, s)
	done := getRun(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunSucceeded, done.Status)
	for _, key := range []string{"s1", "s2", "s3", "s5"} {
		attempts, err := s.AttemptList(ctx, r.ID, key)
		require.NoError(t, err)
		require.Len(t, attempts, 1, "step %s ran once", key)
	}
	attempts, err := s.AttemptList(ctx, r.ID, "s4")
	require.NoError(t, err)
	require.Equal(t, []catalog.AttemptStatus{catalog.AttemptFailed, catalog.AttemptSucceeded},
		[]catalog.AttemptStatus{attempts[0].Status, attempts[1].Status})
	require.Equal(t, catalog.RunFailed, failed.Status)
}

// TestRunRetryCanceledMidway: a run canceled while a step ran is running again; the
// canceled steps run, the succeeded one does not.
func TestRunRetryCanceledMidway(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, diamond(1))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["a"], catalog.OutcomeSucceeded, false, `1`))
	claimKeys(t, ctx, s, "d1", 2)
	require.NoError(t, s.RunCancel(ctx, r.ID, "stop"))
	got, err := retry(ctx, s, r.ID, 0)
	require.NoError(t, err)
	require.Equal(t, catalog.RunRunning, got.Status)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready", "c": "ready", "d": "waiting"}, statuses(t, ctx, s, r.ID))
	require.Equal(t, 2, steps(t, ctx, s, r.ID)["d"].DepsRemaining)
	drive(t, ctx, s)
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, r.ID).Status)
	attempts, err := s.AttemptList(ctx, r.ID, "b")
	require.NoError(t, err)
	require.Equal(t, []catalog.AttemptStatus{catalog.AttemptCanceled, catalog.AttemptSucceeded},
		[]catalog.AttemptStatus{attempts[0].Status, attempts[1].Status})
}

// TestRunRetryOntoVersion: a retry moves the run onto another version only when
// every kept step is there with the same key and needs; the steps it does not keep
// are laid out from that version.
func TestRunRetryOntoVersion(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	// v1: a → b, a → x; b and x fail.
	v1 := catalogtest.Version(t, s, "wf",
		catalog.NewStep{Key: "a", MaxAttempts: 1},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1},
		catalog.NewStep{Key: "x", Needs: []string{"a"}, MaxAttempts: 1})
	// v2: a → b → c; no x; b has 3 attempts. Compatible: a is the same.
	v2 := catalogtest.Version(t, s, "wf",
		catalog.NewStep{Key: "a", MaxAttempts: 2},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 3},
		catalog.NewStep{Key: "c", Needs: []string{"b"}, MaxAttempts: 1})
	// v3: a needs z. v4: no a.
	v3 := catalogtest.Version(t, s, "wf",
		catalog.NewStep{Key: "z", MaxAttempts: 1},
		catalog.NewStep{Key: "a", Needs: []string{"z"}, MaxAttempts: 1},
		catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	v4 := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "b", MaxAttempts: 1})
	r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v1.Version})
	require.NoError(t, err)
	drive(t, ctx, s, "b", "x")
	failed := getRun(t, ctx, s, r.ID)
	require.Equal(t, catalog.RunFailed, failed.Status)
	xs, err := s.AttemptList(ctx, r.ID, "x")
	require.NoError(t, err)
	require.Len(t, xs, 1)

	for _, tt := range []struct {
		version int
		reason  string
	}{
		{v3.Version, "a (needs nothing in the run, z in version 3)"},
		{v4.Version, "a (not in version 4)"},
	} {
		_, err := retry(ctx, s, r.ID, tt.version)
		require.ErrorIs(t, err, catalog.ErrIncompatibleVersion)
		require.Contains(t, catalog.Reason(err), tt.reason)
		require.Equal(t, failed.Revision, getRun(t, ctx, s, r.ID).Revision, "nothing written")
	}
	_, err = retry(ctx, s, r.ID, 99)
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.Contains(t, catalog.Reason(err), "workflow wf has no version 99")

	got, err := retry(ctx, s, r.ID, v2.Version)
	require.NoError(t, err)
	require.Equal(t, v2.Version, got.Version)
	require.Equal(t, 3, got.StepsTotal)
	require.Equal(t, 2, got.StepsRemaining)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready", "c": "waiting"}, statuses(t, ctx, s, r.ID))
	after := steps(t, ctx, s, r.ID)
	require.Equal(t, 1, after["a"].MaxAttempts, "a kept step is kept as it is")
	require.Equal(t, 3, after["b"].MaxAttempts, "b is laid out from version 2")
	xs, err = s.AttemptList(ctx, r.ID, "x")
	require.NoError(t, err)
	require.Empty(t, xs, "x's attempt went with x (steps_deleted)")
	e := lastEvent(t, ctx, s, r.ID)
	require.JSONEq(t, `{"actor":"alice","version":2,"previous_version":1,"steps":["b","c"],"try":2}`, string(e.Data))

	// The new edge b → c works; b has its new budget.
	c := claimKeys(t, ctx, s, "d1", 1)["b"]
	require.NoError(t, s.StepFinish(ctx, &catalog.StepFinishParams{RunID: r.ID, Key: "b", LeaseToken: c.LeaseToken,
		Outcome: catalog.OutcomeFailed, Retryable: true, Error: json.RawMessage(`{"message":"again"}`)}))
	require.Equal(t, "ready", statuses(t, ctx, s, r.ID)["b"], "a budget of 3")
	drive(t, ctx, s)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "succeeded", "c": "succeeded"}, statuses(t, ctx, s, r.ID))
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, r.ID).Status)
}

// TestRunRetryConcurrent: retries of one run at once: exactly one takes effect, the
// others find it running (ErrRunState).
func TestRunRetryConcurrent(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, diamond(1))
	drive(t, ctx, s, "a")
	require.Equal(t, catalog.RunFailed, getRun(t, ctx, s, r.ID).Status)
	const n = 8
	errs := make([]error, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			_, errs[i] = retry(ctx, s, r.ID, 0)
			return nil
		})
	}
	require.NoError(t, g.Wait())
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
			continue
		}
		require.ErrorIs(t, err, catalog.ErrRunState)
	}
	require.Equal(t, 1, won)
	retries := 0
	events, err := s.EventList(ctx, r.ID, 0, 1000)
	require.NoError(t, err)
	for _, e := range events {
		if e.Type == catalog.EventRunRetried {
			retries++
		}
	}
	require.Equal(t, 1, retries)
}

// TestRunRetryIdempotency: the same Idempotency-Key returns the run without a second
// retry; the key with another request is ErrIdempotencyMismatch.
func TestRunRetryIdempotency(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
	drive(t, ctx, s, "a")
	p := &catalog.RunRetryParams{RunID: r.ID, Actor: "alice", IdempotencyKey: "k1", RequestHash: "h1"}
	first, retried, err := s.RunRetry(ctx, p)
	require.NoError(t, err)
	require.True(t, retried)
	drive(t, ctx, s, "a") // fails again
	again, retried, err := s.RunRetry(ctx, p)
	require.NoError(t, err)
	require.False(t, retried, "the same key does not retry twice")
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, catalog.RunFailed, again.Status)
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Version: 1, IdempotencyKey: "k1", RequestHash: "h2"})
	require.ErrorIs(t, err, catalog.ErrIdempotencyMismatch)
	// Another key retries.
	_, retried, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, IdempotencyKey: "k2", RequestHash: "h1"})
	require.NoError(t, err)
	require.True(t, retried)
}

func rerun(ctx context.Context, s *catalog.Store, p catalog.RunRerunParams) (*catalog.Run, *catalog.RerunPlan, error) {
	if p.Actor == "" {
		p.Actor = "bob"
	}
	r, plan, _, err := s.RunRerun(ctx, &p)
	return r, plan, err
}

// TestRunRerun: a rerun of a 5-step chain from step 3 with new input reuses steps
// 1–2 by reference (same stored output, no attempt) and runs 3–5; its dry run
// plans exactly that and creates nothing.
func TestRunRerun(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	src := newRun(t, ctx, s, chain(5))
	// s2's output is a blob reference: it is carried over as it is.
	const blobRef = `{"$blob": {"digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000", "size": 9999999}}`
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s1"], catalog.OutcomeSucceeded, false, `{"step":"s1"}`))
	require.NoError(t, finish(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["s2"], catalog.OutcomeSucceeded, false, blobRef))
	drive(t, ctx, s)
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, src.ID).Status)
	source := steps(t, ctx, s, src.ID)

	p := catalog.RunRerunParams{Source: src.ID, FromStep: "s3", Input: json.RawMessage(`{"x":2}`), DryRun: true}
	dry, plan, err := rerun(ctx, s, p)
	require.NoError(t, err)
	require.Nil(t, dry)
	require.Equal(t, &catalog.RerunPlan{Reused: []string{"s1", "s2"}, Run: []string{"s3", "s4", "s5"}}, plan)
	runs, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, runs, 1, "a dry run creates nothing")

	p.DryRun = false
	r, plan2, err := rerun(ctx, s, p)
	require.NoError(t, err)
	require.Equal(t, plan, plan2)
	require.Equal(t, catalog.RunPending, r.Status)
	require.Equal(t, src.ID, *r.RerunOf)
	require.Equal(t, "s3", *r.RerunFromStep)
	require.JSONEq(t, `{"x":2}`, string(r.Input))
	require.Equal(t, 5, r.StepsTotal)
	require.Equal(t, 3, r.StepsRemaining)
	got := steps(t, ctx, s, r.ID)
	for _, key := range []string{"s1", "s2"} {
		require.Equal(t, catalog.StepSucceeded, got[key].Status)
		require.Equal(t, string(source[key].Output), string(got[key].Output), "%s: the stored output, as it is", key)
		require.Zero(t, got[key].Attempts)
		attempts, err := s.AttemptList(ctx, r.ID, key)
		require.NoError(t, err)
		require.Empty(t, attempts)
	}
	require.Equal(t, map[string]string{"s1": "succeeded", "s2": "succeeded", "s3": "ready", "s4": "waiting", "s5": "waiting"},
		statuses(t, ctx, s, r.ID))
	events, err := s.EventList(ctx, r.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, events, 2)
	require.Equal(t, catalog.EventRunCreated, events[0].Type)
	require.JSONEq(t, fmt.Sprintf(`{"workflow":"wf","version":1,"rerun_of":%q,"from_step":"s3","actor":"bob"}`, src.ID), string(events[0].Data))
	require.Equal(t, catalog.EventStepReused, events[1].Type)
	require.JSONEq(t, fmt.Sprintf(`{"steps":["s1","s2"],"rerun_of":%q}`, src.ID), string(events[1].Data))
	require.Equal(t, int64(2), r.Revision)

	// s3 gets s2's output as its dependency; the rest runs.
	c := claimKeys(t, ctx, s, "d1", 1)["s3"]
	require.Equal(t, r.ID, c.RunID)
	require.JSONEq(t, `{"s2":`+blobRef+`}`, string(c.Deps))
	require.JSONEq(t, `{"x":2}`, string(c.Input))
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `3`))
	drive(t, ctx, s)
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, r.ID).Status)

	// Without input, the source's.
	r2, _, err := rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "s1"})
	require.NoError(t, err)
	require.JSONEq(t, `{"x":1}`, string(r2.Input))
}

// TestRunRerunPlan: which steps a rerun reuses: those not downstream of from_step
// that succeeded in the source; those that did not succeed run fresh.
func TestRunRerunPlan(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	// diamond a → (b, c) → d; b fails, d is skipped.
	src := newRun(t, ctx, s, diamond(1))
	drive(t, ctx, s, "b")
	require.Equal(t, catalog.RunFailed, getRun(t, ctx, s, src.ID).Status)
	for _, tt := range []struct {
		from string
		want catalog.RerunPlan
	}{
		{"c", catalog.RerunPlan{Reused: []string{"a"}, Run: []string{"b", "c", "d"}}},
		{"b", catalog.RerunPlan{Reused: []string{"a", "c"}, Run: []string{"b", "d"}}},
		{"a", catalog.RerunPlan{Reused: []string{}, Run: []string{"a", "b", "c", "d"}}},
		{"d", catalog.RerunPlan{Reused: []string{"a", "c"}, Run: []string{"b", "d"}}},
	} {
		_, plan, err := rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: tt.from, DryRun: true})
		require.NoError(t, err)
		require.Equal(t, tt.want, *plan, "from %s", tt.from)
	}
	r, _, err := rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "a"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "ready", "b": "waiting", "c": "waiting", "d": "waiting"}, statuses(t, ctx, s, r.ID))
	events, err := s.EventList(ctx, r.ID, 0, 10)
	require.NoError(t, err)
	require.Len(t, events, 1, "no step.reused event when nothing is reused")
}

// TestRunRerunRefusals: what a rerun refuses, writing nothing.
func TestRunRerunRefusals(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	src := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	_, _, err := rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "b"})
	require.ErrorIs(t, err, catalog.ErrRunState)
	require.Contains(t, catalog.Reason(err), "is pending: only a run that has ended can be rerun")
	drive(t, ctx, s)

	_, _, err = rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "nope"})
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	require.Equal(t, "step nope is not a step of version 1 of workflow wf", catalog.Reason(err))
	_, _, err = rerun(ctx, s, catalog.RunRerunParams{Source: uuid.New(), FromStep: "a"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, _, err = rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "a", Version: 7})
	require.ErrorIs(t, err, catalog.ErrNotFound)

	// Version 2 gives a other needs: reusing a is refused; rerunning from a is not.
	v2 := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "z", MaxAttempts: 1},
		catalog.NewStep{Key: "a", Needs: []string{"z"}, MaxAttempts: 1}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1})
	_, _, err = rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "b", Version: v2.Version, DryRun: true})
	require.ErrorIs(t, err, catalog.ErrIncompatibleVersion)
	require.Contains(t, catalog.Reason(err), "a (needs nothing in the run, z in version 2)")
	_, plan, err := rerun(ctx, s, catalog.RunRerunParams{Source: src.ID, FromStep: "a", Version: v2.Version, DryRun: true})
	require.NoError(t, err)
	require.Equal(t, catalog.RerunPlan{Reused: []string{}, Run: []string{"z", "a", "b"}}, *plan)

	runs, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, runs, 1, "nothing created")
}

// TestRunRerunIdempotency: the same key returns the first rerun and its plan.
func TestRunRerunIdempotency(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	src := newRun(t, ctx, s, chain(3))
	drive(t, ctx, s)
	p := &catalog.RunRerunParams{Source: src.ID, FromStep: "s2", Actor: "bob", IdempotencyKey: "k", RequestHash: "h"}
	first, plan, created, err := s.RunRerun(ctx, p)
	require.NoError(t, err)
	require.True(t, created)
	again, plan2, created, err := s.RunRerun(ctx, p)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, first.ID, again.ID)
	require.Equal(t, plan, plan2)
	_, _, _, err = s.RunRerun(ctx, &catalog.RunRerunParams{Source: src.ID, FromStep: "s3", IdempotencyKey: "k", RequestHash: "h2"})
	require.True(t, errors.Is(err, catalog.ErrIdempotencyMismatch))
}

// TestRetryAndRerunMeetPause: in a paused workflow a retried run is held again
// (paused by its workflow, its steps held, released by the workflow's resume) and a
// rerun starts paused, as a start would; a rerun keeps the source's labels; steps
// laid out again keep their on_exhausted.
func TestRetryAndRerunMeetPause(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	layout := chain(3)
	layout[2].OnExhausted = catalog.OnExhaustedPause
	catalogtest.Version(t, s, "paws", layout...)
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "paws"})
	require.NoError(t, err)
	source, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "paws", Labels: catalog.Labels{"tenant": "acme"}})
	require.NoError(t, err)
	drive(t, ctx, s, "s2")
	require.Equal(t, catalog.RunFailed, getRun(t, ctx, s, run.ID).Status)

	_, err = s.WorkflowPause(ctx, "paws", "carol", "")
	require.NoError(t, err)
	_, err = retry(ctx, s, run.ID, 0)
	require.NoError(t, err)
	st, reason := runStatus(t, ctx, s, run.ID)
	require.Equal(t, catalog.RunPaused, st)
	require.Equal(t, catalog.PauseReason("workflow"), reason)
	require.Empty(t, claimAll(t, ctx, s), "a held run starts nothing")

	again, plan, err := rerun(ctx, s, catalog.RunRerunParams{Source: source.ID, FromStep: "s2"})
	require.NoError(t, err)
	require.Equal(t, []string{"s1"}, plan.Reused)
	st, _ = runStatus(t, ctx, s, again.ID)
	require.Equal(t, catalog.RunPaused, st, "a rerun in a paused workflow starts paused")
	require.Equal(t, catalog.Labels{"tenant": "acme"}, getRun(t, ctx, s, again.ID).Labels)
	require.Equal(t, catalog.OnExhaustedPause, steps(t, ctx, s, again.ID)["s3"].OnExhausted)

	_, err = s.WorkflowResume(ctx, "paws", "carol", "")
	require.NoError(t, err)
	drive(t, ctx, s)
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, run.ID).Status)
	require.Equal(t, catalog.RunSucceeded, getRun(t, ctx, s, again.ID).Status)
}

// TestRunRetryOntoAlias: a retry or a rerun may name an alias of the workflow
// instead of a version: the version it names at that moment; an unknown alias is
// ErrNotFound and changes nothing.
func TestRunRetryOntoAlias(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "aka", chain(2)...)
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "aka"})
	require.NoError(t, err)
	drive(t, ctx, s, "s2")
	catalogtest.Version(t, s, "aka", chain(2)...) // a fix: version 2
	_, err = s.AliasSet(ctx, &catalog.AliasSetParams{Workflow: "aka", Alias: "stable", Version: 2, Actor: "alice"})
	require.NoError(t, err)

	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: run.ID, Alias: "canary", Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
	require.ErrorContains(t, err, `has no alias "canary"`)
	require.Equal(t, catalog.RunFailed, getRun(t, ctx, s, run.ID).Status)

	_, plan, err := rerun(ctx, s, catalog.RunRerunParams{Source: run.ID, FromStep: "s2", Alias: "stable", DryRun: true})
	require.NoError(t, err)
	require.Equal(t, []string{"s1"}, plan.Reused)

	got, _, err := s.RunRetry(ctx, &catalog.RunRetryParams{RunID: run.ID, Alias: "stable", Actor: "alice"})
	require.NoError(t, err)
	require.Equal(t, 2, got.Version)
}
