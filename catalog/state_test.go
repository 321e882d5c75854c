package catalog_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// coverage records the states and events that TestStepFinishTransitions reached, so
// that the test can say it reached every one.
type coverage struct {
	mu      sync.Mutex
	run     map[catalog.RunStatus]bool
	step    map[catalog.StepStatus]bool
	attempt map[catalog.AttemptStatus]bool
	event   map[catalog.EventType]bool
	outcome map[catalog.Outcome]bool
}

// observe records the current states of a run, its steps and attempts, and its events.
func (c *coverage) observe(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) {
	t.Helper()
	r, err := s.RunGet(ctx, id)
	require.NoError(t, err)
	steps, err := s.StepList(ctx, id)
	require.NoError(t, err)
	events, err := s.EventList(ctx, id, 0, 1000)
	require.NoError(t, err)
	var attempts []catalog.Attempt
	for _, st := range steps {
		a, err := s.AttemptList(ctx, id, st.Key)
		require.NoError(t, err)
		attempts = append(attempts, a...)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.run[r.Status] = true
	for _, st := range steps {
		c.step[st.Status] = true
	}
	for _, a := range attempts {
		c.attempt[a.Status] = true
	}
	for _, e := range events {
		c.event[e.Type] = true
	}
}

// finishParams is the end of a claimed attempt; failures carry an error.
func finishParams(c catalog.Claimed, outcome catalog.Outcome, retryable bool, retryIn time.Duration) *catalog.StepFinishParams {
	p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: outcome,
		Retryable: retryable, RetryIn: retryIn}
	if outcome == catalog.OutcomeSucceeded {
		p.Output = json.RawMessage(`{"v":1}`)
	} else {
		p.Error = json.RawMessage(`{"message":"boom"}`)
	}
	return p
}

// eventTypes returns the types of a run's events after the first skip.
func eventTypes(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID, skip int) []catalog.EventType {
	t.Helper()
	events, err := s.EventList(ctx, id, 0, 1000)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(events), skip)
	var out []catalog.EventType
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq, "seqs are 1, 2, 3, …")
		if i >= skip {
			out = append(out, e.Type)
		}
	}
	return out
}

func lastEvent(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) catalog.Event {
	t.Helper()
	events, err := s.EventList(ctx, id, 0, 1000)
	require.NoError(t, err)
	require.NotEmpty(t, events)
	return events[len(events)-1]
}

// TestStepFinishTransitions pins the state machine (state.go) as the catalog's
// functions implement it, through the path production takes: StepFinish is
// StepFinishBatch of one, StepSweep, RunCancel. The last check asserts that the cases
// reached every run, step and attempt state, every outcome and every event type.
func TestStepFinishTransitions(t *testing.T) {
	t.Parallel()
	cov := &coverage{run: map[catalog.RunStatus]bool{}, step: map[catalog.StepStatus]bool{},
		attempt: map[catalog.AttemptStatus]bool{}, event: map[catalog.EventType]bool{}, outcome: map[catalog.Outcome]bool{}}

	// What ready_at becomes.
	type readyAt int
	const (
		readyAtKept  readyAt = iota // as it was: the step is terminal
		readyAtNow                  // claimable at once
		readyAtRetry                // claimable after RetryIn
	)
	const retryIn = time.Hour
	tests := []struct {
		name      string
		outcome   catalog.Outcome
		retryable bool
		// maxAttempts of the one-step run: with 1 the claim spent the budget, with
		// 2 an attempt is left.
		maxAttempts int
		wantStep    catalog.StepStatus
		wantAttempt catalog.AttemptStatus
		wantCounted bool
		wantReadyAt readyAt
		// wantEvents are the events that the finish wrote.
		wantEvents []catalog.EventType
		wantRun    catalog.RunStatus
	}{
		{name: "succeeded", outcome: catalog.OutcomeSucceeded, maxAttempts: 1,
			wantStep: catalog.StepSucceeded, wantAttempt: catalog.AttemptSucceeded, wantCounted: true, wantReadyAt: readyAtKept,
			wantEvents: []catalog.EventType{catalog.EventStepSucceeded, catalog.EventRunSucceeded}, wantRun: catalog.RunSucceeded},

		{name: "failed, retryable, budget left", outcome: catalog.OutcomeFailed, retryable: true, maxAttempts: 2,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptFailed, wantCounted: true, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
		{name: "failed, retryable, budget spent", outcome: catalog.OutcomeFailed, retryable: true, maxAttempts: 1,
			wantStep: catalog.StepFailed, wantAttempt: catalog.AttemptFailed, wantCounted: true, wantReadyAt: readyAtKept,
			wantEvents: []catalog.EventType{catalog.EventStepFailed, catalog.EventRunFailed}, wantRun: catalog.RunFailed},
		{name: "failed, not retryable, budget left", outcome: catalog.OutcomeFailed, maxAttempts: 2,
			wantStep: catalog.StepFailed, wantAttempt: catalog.AttemptFailed, wantCounted: true, wantReadyAt: readyAtKept,
			wantEvents: []catalog.EventType{catalog.EventStepFailed, catalog.EventRunFailed}, wantRun: catalog.RunFailed},

		{name: "timed out, retryable, budget left", outcome: catalog.OutcomeTimedOut, retryable: true, maxAttempts: 2,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptTimedOut, wantCounted: true, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
		{name: "timed out, retryable, budget spent", outcome: catalog.OutcomeTimedOut, retryable: true, maxAttempts: 1,
			wantStep: catalog.StepFailed, wantAttempt: catalog.AttemptTimedOut, wantCounted: true, wantReadyAt: readyAtKept,
			wantEvents: []catalog.EventType{catalog.EventStepFailed, catalog.EventRunFailed}, wantRun: catalog.RunFailed},
		{name: "timed out, not retryable, budget left", outcome: catalog.OutcomeTimedOut, maxAttempts: 2,
			wantStep: catalog.StepFailed, wantAttempt: catalog.AttemptTimedOut, wantCounted: true, wantReadyAt: readyAtKept,
			wantEvents: []catalog.EventType{catalog.EventStepFailed, catalog.EventRunFailed}, wantRun: catalog.RunFailed},

		// Interruptions (the dispatcher died), handbacks and infrastructure
		// failures do not count: the budget and Retryable do not matter
		// (interruptions have a bound of their own: interruption_test.go).
		{name: "interrupted, retryable, budget left", outcome: catalog.OutcomeInterrupted, retryable: true, maxAttempts: 2,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptInterrupted, wantCounted: false, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
		{name: "interrupted, retryable, budget spent", outcome: catalog.OutcomeInterrupted, retryable: true, maxAttempts: 1,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptInterrupted, wantCounted: false, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
		{name: "handback, budget spent", outcome: catalog.OutcomeHandback, maxAttempts: 1,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptInterrupted, wantCounted: false, wantReadyAt: readyAtNow,
			wantEvents: []catalog.EventType{catalog.EventStepHandedBack}, wantRun: catalog.RunRunning},
		{name: "handback, retryable, budget left", outcome: catalog.OutcomeHandback, retryable: true, maxAttempts: 2,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptInterrupted, wantCounted: false, wantReadyAt: readyAtNow,
			wantEvents: []catalog.EventType{catalog.EventStepHandedBack}, wantRun: catalog.RunRunning},
		{name: "infrastructure failure, budget spent", outcome: catalog.OutcomeInfraFailed, maxAttempts: 1,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptFailed, wantCounted: false, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
		{name: "infrastructure failure, retryable, budget left", outcome: catalog.OutcomeInfraFailed, retryable: true, maxAttempts: 2,
			wantStep: catalog.StepReady, wantAttempt: catalog.AttemptFailed, wantCounted: false, wantReadyAt: readyAtRetry,
			wantEvents: []catalog.EventType{catalog.EventStepRetrying}, wantRun: catalog.RunRunning},
	}

	// subtest runs a case in parallel and counts those that passed: with -run
	// selecting some, or a case skipped, the coverage is not checked.
	var mu sync.Mutex
	passed, total := 0, 0
	subtest := func(t *testing.T, name string, f func(t *testing.T)) {
		total++
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f(t)
			mu.Lock()
			passed++
			mu.Unlock()
		})
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			subtest(t, tt.name, func(t *testing.T) {
				ctx, tb := setup(t)
				s := tb.store
				r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: tt.maxAttempts}})
				cov.observe(t, ctx, s, r.ID)
				c := claimKeys(t, ctx, s, "d1", 1)["a"]
				cov.observe(t, ctx, s, r.ID)
				before, err := s.StepGet(ctx, r.ID, "a")
				require.NoError(t, err)

				p := finishParams(c, tt.outcome, tt.retryable, retryIn)
				require.NoError(t, s.StepFinish(ctx, p))
				cov.mu.Lock()
				cov.outcome[tt.outcome] = true
				cov.mu.Unlock()
				cov.observe(t, ctx, s, r.ID)

				st, err := s.StepGet(ctx, r.ID, "a")
				require.NoError(t, err)
				require.Equal(t, tt.wantStep, st.Status, "step")
				require.Equal(t, 1, st.Attempts)
				wantCounted := 0
				if tt.wantCounted {
					wantCounted = 1
				}
				require.Equal(t, wantCounted, st.CountedAttempts, "counted attempts")
				require.Equal(t, tt.wantStep.Terminal(), st.FinishedAt != nil, "finished_at set")
				require.Nil(t, st.LeaseToken, "the lease is released")
				switch tt.wantReadyAt {
				case readyAtKept:
					require.Equal(t, before.ReadyAt, st.ReadyAt, "ready_at")
				case readyAtNow:
					require.WithinDuration(t, time.Now(), *st.ReadyAt, time.Minute, "ready_at")
				case readyAtRetry:
					require.WithinDuration(t, time.Now().Add(retryIn), *st.ReadyAt, time.Minute, "ready_at")
				}
				switch tt.outcome {
				case catalog.OutcomeSucceeded:
					require.JSONEq(t, `{"v":1}`, string(st.Output))
					require.Nil(t, st.LastError)
				case catalog.OutcomeHandback:
					require.Nil(t, st.LastError, "a handback is not an error of the step")
				default:
					require.JSONEq(t, `{"message":"boom"}`, string(st.LastError))
				}

				at, err := s.AttemptGet(ctx, r.ID, "a", 1)
				require.NoError(t, err)
				require.Equal(t, tt.wantAttempt, at.Status, "attempt")
				require.Equal(t, tt.wantCounted, at.Counted, "attempt counted")
				require.True(t, at.FinishedAt != nil)

				// run.created, step.started, then what the finish wrote.
				require.Equal(t, tt.wantEvents, eventTypes(t, ctx, s, r.ID, 2))
				if tt.wantEvents[0] == catalog.EventStepRetrying {
					var data struct {
						AttemptStatus catalog.AttemptStatus `json:"attempt_status"`
						Counted       bool                  `json:"counted"`
					}
					events, err := s.EventList(ctx, r.ID, 2, 1)
					require.NoError(t, err)
					require.NoError(t, json.Unmarshal(events[0].Data, &data))
					require.Equal(t, tt.wantAttempt, data.AttemptStatus)
					require.Equal(t, tt.wantCounted, data.Counted)
				}

				got, err := s.RunGet(ctx, r.ID)
				require.NoError(t, err)
				require.Equal(t, tt.wantRun, got.Status, "run")
				require.Equal(t, tt.wantRun.Terminal(), got.FinishedAt != nil, "run finished_at set")
				require.Equal(t, tt.wantRun.Terminal(), got.StepsRemaining == 0, "steps remaining")

				// What a ready step's ready_at means: claimable at once, or not yet.
				switch tt.wantReadyAt {
				case readyAtNow:
					require.Equal(t, 2, claimKeys(t, ctx, s, "d2", 1)["a"].Attempt)
				case readyAtRetry:
					claimKeys(t, ctx, s, "d2", 0)
				}
				// The lease is spent: a second finish is fenced out and changes nothing.
				require.ErrorIs(t, s.StepFinish(ctx, p), catalog.ErrLeaseLost)
			})
		}

		// An expired lease (its dispatcher died): the sweeper reports the attempt
		// interrupted and retryable, which does not count, whatever the budget.
		for _, maxAttempts := range []int{2, 1} {
			name := map[int]string{2: "sweep, budget left", 1: "sweep, budget spent"}[maxAttempts]
			subtest(t, name, func(t *testing.T) {
				ctx, tb := setup(t)
				s := tb.store
				r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: maxAttempts}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
				claimed, err := s.StepClaim(ctx, "d1", 10, time.Millisecond)
				require.NoError(t, err)
				require.Len(t, claimed, 1)
				require.EventuallyWithT(t, func(c *assert.CollectT) {
					n, err := s.StepSweep(ctx, 10, 0)
					require.NoError(c, err)
					assert.Equal(c, 1, n)
				}, 10*time.Second, 10*time.Millisecond, "waiting for the 1ms lease to expire and be swept")
				cov.observe(t, ctx, s, r.ID)
				at, err := s.AttemptGet(ctx, r.ID, "a", 1)
				require.NoError(t, err)
				require.Equal(t, catalog.AttemptInterrupted, at.Status)
				require.False(t, at.Counted)
				require.JSONEq(t, `{"message": "lease expired: the dispatcher holding the step stopped or lost the database", "code": "lease_expired"}`, string(at.Error))
				st, err := s.StepGet(ctx, r.ID, "a")
				require.NoError(t, err)
				require.Equal(t, 0, st.CountedAttempts)
				got, err := s.RunGet(ctx, r.ID)
				require.NoError(t, err)
				require.Equal(t, map[string]string{"a": "ready", "b": "waiting"}, statuses(t, ctx, s, r.ID))
				require.Equal(t, []catalog.EventType{catalog.EventStepRetrying}, eventTypes(t, ctx, s, r.ID, 2))
				require.Equal(t, catalog.RunRunning, got.Status)
				// The stale dispatcher's completion is fenced out.
				require.ErrorIs(t, s.StepFinish(ctx, finishParams(claimed[0], catalog.OutcomeSucceeded, false, 0)), catalog.ErrLeaseLost)
			})
		}

		// A step that did not succeed skips its dependents, transitively; the run fails
		// once the others are done.
		subtest(t, "failure skips dependents", func(t *testing.T) {
			ctx, tb := setup(t)
			s := tb.store
			// a → (b, c) → d, and e beside them.
			r := newRun(t, ctx, s, append(diamond(1), catalog.NewStep{Key: "e", MaxAttempts: 1}))
			cov.observe(t, ctx, s, r.ID)
			got := claimKeys(t, ctx, s, "d1", 2)
			cov.observe(t, ctx, s, r.ID)
			require.NoError(t, s.StepFinish(ctx, finishParams(got["a"], catalog.OutcomeFailed, false, 0)))
			cov.observe(t, ctx, s, r.ID)
			require.Equal(t, map[string]string{"a": "failed", "b": "skipped", "c": "skipped", "d": "skipped", "e": "running"},
				statuses(t, ctx, s, r.ID))
			e := lastEvent(t, ctx, s, r.ID)
			require.Equal(t, catalog.EventStepSkipped, e.Type)
			require.JSONEq(t, `{"steps": ["b", "c", "d"], "because": "a",
				"reasons": {"b": "upstream_failed", "c": "upstream_failed", "d": "upstream_skipped"}}`, string(e.Data))
			run, err := s.RunGet(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, catalog.RunRunning, run.Status, "e still runs")
			require.Equal(t, 1, run.StepsRemaining)

			require.NoError(t, s.StepFinish(ctx, finishParams(got["e"], catalog.OutcomeSucceeded, false, 0)))
			run, err = s.RunGet(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, catalog.RunFailed, run.Status)
			require.JSONEq(t, `{"message": "step a failed", "step": "a", "cause": {"message": "boom"}}`, string(run.Error))
			require.Equal(t, catalog.EventRunFailed, lastEvent(t, ctx, s, r.ID).Type)
		})

		// A success readies the dependents whose needs are all met, and only those.
		subtest(t, "success readies dependents", func(t *testing.T) {
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, diamond(1))
			a := claimKeys(t, ctx, s, "d1", 1)["a"]
			require.NoError(t, s.StepFinish(ctx, finishParams(a, catalog.OutcomeSucceeded, false, 0)))
			require.Equal(t, map[string]string{"a": "succeeded", "b": "ready", "c": "ready", "d": "waiting"}, statuses(t, ctx, s, r.ID))
			got := claimKeys(t, ctx, s, "d1", 2)
			require.NoError(t, s.StepFinish(ctx, finishParams(got["b"], catalog.OutcomeSucceeded, false, 0)))
			require.Equal(t, catalog.StepWaiting, stepStatus(t, ctx, s, r.ID, "d"), "c is not done")
			require.NoError(t, s.StepFinish(ctx, finishParams(got["c"], catalog.OutcomeSucceeded, false, 0)))
			require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "d"))
			cov.observe(t, ctx, s, r.ID)
		})

		// Cancel: unfinished steps are canceled, whatever their state, and the running
		// attempt too; the late completion is fenced out.
		subtest(t, "cancel", func(t *testing.T) {
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, append(diamond(1), catalog.NewStep{Key: "e", MaxAttempts: 1}))
			got := claimKeys(t, ctx, s, "d1", 2)
			require.NoError(t, s.StepFinish(ctx, finishParams(got["e"], catalog.OutcomeSucceeded, false, 0)))
			require.NoError(t, s.RunCancel(ctx, r.ID, "user asked"))
			cov.observe(t, ctx, s, r.ID)
			require.Equal(t, map[string]string{"a": "canceled", "b": "canceled", "c": "canceled", "d": "canceled", "e": "succeeded"},
				statuses(t, ctx, s, r.ID))
			at, err := s.AttemptGet(ctx, r.ID, "a", 1)
			require.NoError(t, err)
			require.Equal(t, catalog.AttemptCanceled, at.Status)
			run, err := s.RunGet(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, catalog.RunCanceled, run.Status)
			require.True(t, run.FinishedAt != nil)
			e := lastEvent(t, ctx, s, r.ID)
			require.Equal(t, catalog.EventRunCanceled, e.Type)
			require.JSONEq(t, `{"reason": "user asked"}`, string(e.Data))

			require.ErrorIs(t, s.StepFinish(ctx, finishParams(got["a"], catalog.OutcomeSucceeded, false, 0)), catalog.ErrLeaseLost)
			require.ErrorIs(t, s.StepFinish(ctx, finishParams(got["a"], catalog.OutcomeFailed, true, 0)), catalog.ErrLeaseLost)
			err = s.RunCancel(ctx, r.ID, "")
			require.ErrorIs(t, err, catalog.ErrRunFinished)
			require.ErrorIs(t, err, catalog.ErrConflict)
			require.ErrorIs(t, s.RunCancel(ctx, uuid.New(), ""), catalog.ErrNotFound)
			require.Equal(t, catalog.EventRunCanceled, lastEvent(t, ctx, s, r.ID).Type, "nothing written after the cancel")
		})

		// Checkpoints and progress are events of a running attempt, fenced like the rest.
		subtest(t, "checkpoint and progress", func(t *testing.T) {
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
			c := claimKeys(t, ctx, s, "d1", 1)["a"]
			l := catalog.Lease{RunID: r.ID, Key: "a", Token: c.LeaseToken}
			require.NoError(t, s.StepCheckpoint(ctx, l, json.RawMessage(`{"page":3}`), nil))
			require.NoError(t, s.StepEvent(ctx, l, catalog.EventStepProgress, json.RawMessage(`{"done":0.5}`)))
			require.Equal(t, []catalog.EventType{catalog.EventStepCheckpointed, catalog.EventStepProgress}, eventTypes(t, ctx, s, r.ID, 2))
			cov.observe(t, ctx, s, r.ID)
		})

		// An outcome the state machine does not know fails the whole call, and nothing
		// of the batch is written.
		subtest(t, "unknown outcome", func(t *testing.T) {
			ctx, tb := setup(t)
			s := tb.store
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", MaxAttempts: 1}})
			got := claimKeys(t, ctx, s, "d1", 2)
			errs, err := s.StepFinishBatch(ctx, []*catalog.StepFinishParams{
				finishParams(got["a"], catalog.OutcomeFailed, false, 0),
				finishParams(got["b"], catalog.Outcome("exploded"), false, 0),
			})
			require.ErrorIs(t, err, catalog.ErrInvalidInput)
			require.Nil(t, errs)
			require.Equal(t, map[string]string{"a": "running", "b": "running"}, statuses(t, ctx, s, r.ID))

			// cairn_step_finish takes no successes (those are cairn_steps_succeed's):
			// its own SQLSTATE, CA400.
			// (translateError's mapping of CA400 is TestTranslateError's.)
			_, err = tb.store.DB().ExecContext(ctx, `SELECT cairn_step_finish($1, 'a', $2, 'succeeded', '1', NULL, false, now(), NULL)`,
				r.ID, got["a"].LeaseToken)
			var pqErr *pq.Error
			require.True(t, errors.As(err, &pqErr))
			require.Equal(t, pq.ErrorCode("CA400"), pqErr.Code)
			require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, r.ID, "a"))
		})
	})
	// The cases run in parallel inside "cases", which returns when they are done;
	// then the coverage is checked.
	if passed < total {
		return
	}
	all := func(seen, want any) { require.Equal(t, want, seen, "not every state was reached") }
	all(cov.run, map[catalog.RunStatus]bool{catalog.RunPending: true, catalog.RunRunning: true,
		catalog.RunSucceeded: true, catalog.RunFailed: true, catalog.RunCanceled: true})
	all(cov.step, map[catalog.StepStatus]bool{catalog.StepWaiting: true, catalog.StepReady: true,
		catalog.StepRunning: true, catalog.StepSucceeded: true, catalog.StepFailed: true,
		catalog.StepCanceled: true, catalog.StepSkipped: true})
	all(cov.attempt, map[catalog.AttemptStatus]bool{catalog.AttemptRunning: true, catalog.AttemptSucceeded: true,
		catalog.AttemptFailed: true, catalog.AttemptTimedOut: true, catalog.AttemptInterrupted: true,
		catalog.AttemptCanceled: true})
	all(cov.outcome, map[catalog.Outcome]bool{catalog.OutcomeSucceeded: true, catalog.OutcomeFailed: true,
		catalog.OutcomeTimedOut: true, catalog.OutcomeInterrupted: true, catalog.OutcomeHandback: true,
		catalog.OutcomeInfraFailed: true})
	all(cov.event, map[catalog.EventType]bool{catalog.EventRunCreated: true, catalog.EventRunSucceeded: true,
		catalog.EventRunFailed: true, catalog.EventRunCanceled: true, catalog.EventStepStarted: true,
		catalog.EventStepSucceeded: true, catalog.EventStepRetrying: true, catalog.EventStepFailed: true,
		catalog.EventStepSkipped: true, catalog.EventStepHandedBack: true, catalog.EventStepCheckpointed: true,
		catalog.EventStepProgress: true})
}

func stepStatus(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID, key string) catalog.StepStatus {
	t.Helper()
	st, err := s.StepGet(ctx, id, key)
	require.NoError(t, err)
	return st.Status
}

// wakeListener listens on catalog.ChannelSteps for a test, as a dispatcher does.
type wakeListener struct {
	notes chan catalog.Notification
	db    *sqlx.DB
}

// listenWake starts listening on catalog.ChannelSteps, and returns once it does,
// with a store on the same database.
func listenWake(t *testing.T) (*catalog.Store, *wakeListener) {
	t.Helper()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	db, err := sqlx.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	lctx, stop := context.WithCancel(ctx)
	w := &wakeListener{notes: make(chan catalog.Notification, 16), db: db}
	listened := make(chan error, 1)
	go func() {
		listened <- catalog.Listen(lctx, url, func(n catalog.Notification) {
			select {
			case w.notes <- n:
			default: // never block the listener: the test reads what it needs
			}
		}, catalog.ChannelSteps)
	}()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-listened)
	})
	// The first, empty notification: it listens now.
	select {
	case n := <-w.notes:
		require.Empty(t, n.Channel)
	case err := <-listened:
		t.Fatalf("listen: %v", err)
	}
	return catalog.New(db, nil), w
}

// next returns the next notification on catalog.ChannelSteps (the empty ones of
// a reconnection skipped), or fails after 10 s.
func (w *wakeListener) next(t *testing.T, what string) catalog.Notification {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-w.notes:
			if n.Channel != catalog.ChannelSteps {
				continue
			}
			return n
		case <-deadline:
			t.Fatalf("no wake-up on %s after %s", catalog.ChannelSteps, what)
		}
	}
}

// woken waits for the notification of the action before it (each action's
// transaction sends one: PostgreSQL folds equal ones of a transaction).
func (w *wakeListener) woken(t *testing.T, what string) {
	t.Helper()
	require.Empty(t, w.next(t, what).Payload, "the wake-up of %s", what)
}

// quiet shows that the actions since the last notification sent none: a
// notification the test sends now is the next one received (notifications come
// in the order of their transactions' commits).
func (w *wakeListener) quiet(t *testing.T, what string) {
	t.Helper()
	_, err := w.db.Exec(`SELECT pg_notify($1, 'sentinel')`, catalog.ChannelSteps)
	require.NoError(t, err)
	require.Equal(t, "sentinel", w.next(t, what).Payload, "%s woke the dispatchers", what)
}

// TestWake: dispatchers are woken on catalog.ChannelSteps when steps become ready:
// by a new run, a success that readies a dependent, and a retry.
func TestWake(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, w := listenWake(t)

	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 2}})
	w.woken(t, "RunCreate")
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	require.NoError(t, s.StepFinish(ctx, finishParams(a, catalog.OutcomeSucceeded, false, 0)))
	w.woken(t, "a success that readied a dependent")
	b := claimKeys(t, ctx, s, "d1", 1)["b"]
	require.NoError(t, s.StepFinish(ctx, finishParams(b, catalog.OutcomeFailed, true, 0)))
	w.woken(t, "a retryable failure")
	require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "b"))
}

// TestWakeConcurrentCreates: runs created at the same time (whose wake-ups are
// sent after their commits and folded: Store.wakes) are all found by a dispatcher
// that claims only when woken: the last wake-up comes after the last commit. A
// creation held up for the whole test (its workflow's row locked, as a pause
// does) makes every other one concurrent.
func TestWakeConcurrentCreates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, w := listenWake(t)
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	held := catalogtest.Version(t, s, "held", catalog.NewStep{Key: "a", MaxAttempts: 1})
	lock, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	_, err = lock.ExecContext(ctx, `SELECT 1 FROM workflows WHERE name = 'held' FOR UPDATE`)
	require.NoError(t, err)
	heldDone := make(chan error, 1)
	go func() {
		_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "held", Version: held.Version})
		heldDone <- err
	}()
	require.Eventually(t, func() bool {
		var waiting bool
		require.NoError(t, s.DB().GetContext(ctx, &waiting,
			`SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock')`))
		return waiting
	}, 10*time.Second, 10*time.Millisecond, "the held creation waits for the workflow's row")

	const creators, each = 8, 5
	created := make(chan error, creators)
	for range creators {
		go func() {
			for range each {
				if _, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version}); err != nil {
					created <- err
					return
				}
			}
			created <- nil
		}()
	}
	claimed, done := 0, 0
	for claimed < creators*each || done < creators {
		select {
		case err := <-created:
			require.NoError(t, err)
			done++
		case n := <-w.notes:
			if n.Channel != catalog.ChannelSteps {
				continue
			}
			got, err := s.StepClaim(ctx, "d1", 100, time.Minute)
			require.NoError(t, err)
			claimed += len(got)
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d runs claimed, %d of %d creators done: a run was left for the poll",
				claimed, creators*each, done, creators)
		}
	}
	require.Equal(t, creators*each, claimed)
	require.NoError(t, lock.Rollback())
	require.NoError(t, <-heldDone)
}

// TestWakeLeasedByFinish: a success whose finish leased every step it made
// ready (StepFinishClaim) wakes no dispatcher: they would poll for nothing. One
// that made more ready than it had room for wakes them for the others.
func TestWakeLeasedByFinish(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, w := listenWake(t)

	newRun(t, ctx, s, diamond(1)) // a → (b, c) → d
	w.woken(t, "RunCreate")
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	res, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `{}`)},
		&catalog.ClaimNext{Owner: "d1", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.Len(t, claimed, 1, "room for one of b and c")
	w.woken(t, "a success that leased one of the two steps it made ready")
	w.quiet(t, "nothing since")

	// The other one, claimed; b and c finish, the second leasing d.
	others := claimKeys(t, ctx, s, "d1", 1)
	for _, c := range []catalog.Claimed{claimed[0], others[map[string]string{"b": "c", "c": "b"}[claimed[0].Key]]} {
		res, got, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(c, `{}`)},
			&catalog.ClaimNext{Owner: "d1", Limit: 4, TTL: time.Minute})
		require.NoError(t, err)
		require.NoError(t, res[0])
		claimed = got
	}
	require.Len(t, claimed, 1)
	require.Equal(t, "d", claimed[0].Key)
	w.quiet(t, "a success that leased the one step it made ready")
}

// TestStepsSucceedFiveArguments: the finish that servers before migration 00032
// call during a rolling upgrade still finishes and wakes the dispatchers.
func TestStepsSucceedFiveArguments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, w := listenWake(t)
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	w.woken(t, "RunCreate")
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	var ords pq.Int64Array
	require.NoError(t, s.DB().QueryRowContext(ctx, `SELECT cairn_steps_succeed($1::uuid[], $2::text[], $3::bigint[], $4::text[], $5::text[])`,
		pq.Array([]string{a.RunID.String()}), pq.Array([]string{a.Key}), pq.Array([]int64{a.LeaseToken}),
		pq.Array([]string{`{"v":1}`}), pq.Array([]*string{nil})).Scan(&ords))
	require.Equal(t, pq.Int64Array{1}, ords)
	w.woken(t, "the success that readied b")
	require.Equal(t, catalog.StepSucceeded, stepStatus(t, ctx, s, r.ID, "a"))
	require.Equal(t, catalog.StepReady, stepStatus(t, ctx, s, r.ID, "b"))
}
