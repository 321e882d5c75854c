package catalog_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
)

// lease is the lease of a claimed step.
func lease(c catalog.Claimed) catalog.Lease {
	return catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken}
}

// makeDue moves a suspended step's sleep end and timeout into the past: the test's
// clock jumps ahead.
func makeDue(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID, key string) {
	t.Helper()
	_, err := s.DB().ExecContext(ctx, `
UPDATE steps SET wait_until = wait_until - interval '1000 days', timeout_at = timeout_at - interval '1000 days'
WHERE run_id = $1 AND key = $2`, id, key)
	require.NoError(t, err)
}

func runOf(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) *catalog.Run {
	t.Helper()
	r, err := s.RunGet(ctx, id)
	require.NoError(t, err)
	return r
}

// TestStepSuspend: a running step suspends, fenced by its lease token; it then holds
// no lease, its attempt ended, and the event says what it waits for.
func TestStepSuspend(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}})
	c := claimKeys(t, ctx, s, "d1", 1)["a"]
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)

	stale := lease(c)
	stale.Token++
	require.ErrorIs(t, s.StepSuspend(ctx, stale, catalog.Wait{Kind: catalog.WaitSleep, Until: until}), catalog.ErrLeaseLost)
	require.Equal(t, catalog.StepRunning, stepStatus(t, ctx, s, r.ID, "a"))

	require.ErrorIs(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep}), catalog.ErrInvalidInput,
		"a sleep needs its end")
	require.ErrorIs(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSignal}), catalog.ErrInvalidInput,
		"a signal wait needs its name")

	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: until}))
	st, err := s.StepGet(ctx, r.ID, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.StepSuspended, st.Status)
	require.Nil(t, st.LeaseToken)
	require.Nil(t, st.LeaseOwner)
	require.Equal(t, catalog.WaitSleep, *st.WaitKind)
	require.True(t, until.Equal(*st.WaitUntil))
	require.NotNil(t, st.WaitingSince)
	attempts, err := s.AttemptList(ctx, r.ID, "a")
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, catalog.AttemptSucceeded, attempts[0].Status, "the attempt did its part: it started the wait")
	typ, data := lastEventData(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventStepSuspended, typ)
	require.Equal(t, "sleep", data["kind"])
	require.Contains(t, data, "until")

	// The same lease again: it is gone.
	require.ErrorIs(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: until}), catalog.ErrLeaseLost)
	// A suspended step is not claimed, and the run waits.
	claimKeys(t, ctx, s, "d1", 0)
	require.Equal(t, catalog.RunRunning, runOf(t, ctx, s, r.ID).Status)
	next, err := s.NextWake(ctx)
	require.NoError(t, err)
	require.False(t, next.IsZero())
	require.False(t, next.After(until))
}

// TestStepResolve: a suspended step is completed once; a late or repeated
// completion is refused with ErrRunState and changes nothing.
func TestStepResolve(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	steps := []catalog.NewStep{{Key: "a", MaxAttempts: 3}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}}

	t.Run("succeeded", func(t *testing.T) {
		r := newRun(t, ctx, s, steps)
		c := claimAll(t, ctx, s)["a"]
		require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitApproval}))
		res := catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"ok":true}`), Reason: "approved"}
		require.NoError(t, s.StepResolve(ctx, r.ID, "a", res))
		require.ErrorIs(t, s.StepResolve(ctx, r.ID, "a", res), catalog.ErrRunState)
		require.Equal(t, map[string]string{"a": "succeeded", "b": "ready"}, statuses(t, ctx, s, r.ID))
		st, err := s.StepGet(ctx, r.ID, "a")
		require.NoError(t, err)
		require.JSONEq(t, `{"ok":true}`, string(st.Output))
		types := eventTypes(t, ctx, s, r.ID, 0)
		require.Equal(t, []catalog.EventType{catalog.EventRunCreated, catalog.EventStepStarted, catalog.EventStepSuspended,
			catalog.EventStepResumed, catalog.EventStepSucceeded}, types)
		// Its dependent runs, and the run ends.
		b := claimAll(t, ctx, s)["b"]
		require.NoError(t, s.StepFinish(ctx, finishParams(b, catalog.OutcomeSucceeded, false, 0)))
		require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
	})
	t.Run("failed is terminal", func(t *testing.T) {
		r := newRun(t, ctx, s, steps)
		c := claimAll(t, ctx, s)["a"]
		require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitApproval}))
		require.NoError(t, s.StepResolve(ctx, r.ID, "a", catalog.Resolution{Outcome: catalog.OutcomeFailed,
			Error: json.RawMessage(`{"message":"rejected","code":"rejected"}`)}))
		require.Equal(t, map[string]string{"a": "failed", "b": "skipped"}, statuses(t, ctx, s, r.ID))
		run := runOf(t, ctx, s, r.ID)
		require.Equal(t, catalog.RunFailed, run.Status, "attempts left do not matter: a failed wait is terminal")
		require.ErrorIs(t, s.StepResolve(ctx, r.ID, "a", catalog.Resolution{Outcome: catalog.OutcomeSucceeded}), catalog.ErrRunState)
	})
	t.Run("not suspended", func(t *testing.T) {
		r := newRun(t, ctx, s, steps)
		require.ErrorIs(t, s.StepResolve(ctx, r.ID, "a", catalog.Resolution{Outcome: catalog.OutcomeSucceeded}), catalog.ErrRunState)
		require.ErrorIs(t, s.StepResolve(ctx, r.ID, "zz", catalog.Resolution{Outcome: catalog.OutcomeSucceeded}), catalog.ErrNotFound)
		require.ErrorIs(t, s.StepResolve(ctx, r.ID, "a", catalog.Resolution{Outcome: catalog.OutcomeTimedOut}), catalog.ErrInvalidInput)
	})
}

// TestWakeDueExactlyOnce: concurrent sweepers wake every due sleep once.
func TestWakeDueExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	const runs = 60
	ids := make([]uuid.UUID, runs)
	for i := range ids {
		ids[i] = newRun(t, ctx, s, []catalog.NewStep{{Key: "nap", MaxAttempts: 1}}).ID
	}
	claimed, err := s.StepClaim(ctx, "d1", runs, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, runs)
	until := time.Now().Add(time.Hour)
	for _, c := range claimed {
		require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: until}))
	}
	n, err := s.WakeDue(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is due yet")
	for _, id := range ids {
		makeDue(t, ctx, s, id, "nap")
	}

	var woken atomic.Int64
	var g errgroup.Group
	for range 4 {
		g.Go(func() error {
			for {
				n, err := s.WakeDue(ctx, 7)
				if err != nil {
					return err
				}
				woken.Add(int64(n))
				if n == 0 {
					return nil
				}
			}
		})
	}
	require.NoError(t, g.Wait())
	require.EqualValues(t, runs, woken.Load())
	for _, id := range ids {
		require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, id).Status)
		st, err := s.StepGet(ctx, id, "nap")
		require.NoError(t, err)
		var out map[string]string
		require.NoError(t, json.Unmarshal(st.Output, &out))
		require.Contains(t, out, "slept_until")
		resumed := 0
		for _, e := range eventTypes(t, ctx, s, id, 0) {
			if e == catalog.EventStepResumed {
				resumed++
			}
		}
		require.Equal(t, 1, resumed)
	}
}

// TestWaitTimeout: a wait whose timeout passes fails (code timeout) or, with
// on_timeout continue, succeeds with a null output.
func TestWaitTimeout(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	for _, on := range []catalog.OnTimeout{catalog.OnTimeoutFail, catalog.OnTimeoutContinue} {
		t.Run(string(on), func(t *testing.T) {
			r := newRun(t, ctx, s, []catalog.NewStep{{Key: "w", MaxAttempts: 3}, {Key: "next", Needs: []string{"w"}, MaxAttempts: 1}})
			var c catalog.Claimed
			for _, cl := range claimAll(t, ctx, s) {
				if cl.RunID == r.ID {
					c = cl
				}
			}
			require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSignal, Name: "paid",
				TimeoutAt: time.Now().Add(time.Hour), OnTimeout: on}))
			makeDue(t, ctx, s, r.ID, "w")
			// Other subtests' sweeps may wake it first: either way, once.
			_, err := s.WakeDue(ctx, 100)
			require.NoError(t, err)
			st, err := s.StepGet(ctx, r.ID, "w")
			require.NoError(t, err)
			if on == catalog.OnTimeoutFail {
				require.Equal(t, catalog.StepFailed, st.Status)
				var e map[string]any
				require.NoError(t, json.Unmarshal(st.LastError, &e))
				require.Equal(t, catalog.ErrorCodeTimeout, e["code"])
				require.Equal(t, map[string]string{"w": "failed", "next": "skipped"}, statuses(t, ctx, s, r.ID))
				require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, r.ID).Status)
			} else {
				require.Equal(t, catalog.StepSucceeded, st.Status)
				require.Empty(t, st.Output)
				require.Equal(t, map[string]string{"w": "succeeded", "next": "ready"}, statuses(t, ctx, s, r.ID))
			}
		})
	}
}

// TestWaitHeldAndCanceled: a paused run's waits are not woken until it resumes; a
// canceled run cancels its suspended steps, and a late completion is refused.
func TestWaitHeldAndCanceled(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store

	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "nap", MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["nap"]
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: time.Now().Add(time.Hour)}))
	_, err := s.RunPause(ctx, r.ID, "alice", "")
	require.NoError(t, err)
	makeDue(t, ctx, s, r.ID, "nap")
	n, err := s.WakeDue(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n, "a held wait is not woken")
	next, err := s.NextWake(ctx)
	require.NoError(t, err)
	require.True(t, next.IsZero(), "nor is it due for the wake loop")
	require.Equal(t, catalog.StepSuspended, stepStatus(t, ctx, s, r.ID, "nap"))
	require.NoError(t, s.RunResume(ctx, r.ID, "alice", ""))
	n, err = s.WakeDue(ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)

	r = newRun(t, ctx, s, []catalog.NewStep{{Key: "nap", MaxAttempts: 1}})
	c = claimAll(t, ctx, s)["nap"]
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: time.Now().Add(time.Hour)}))
	require.NoError(t, s.RunCancel(ctx, r.ID, "no"))
	require.Equal(t, catalog.StepCanceled, stepStatus(t, ctx, s, r.ID, "nap"))
	require.Equal(t, catalog.RunCanceled, runOf(t, ctx, s, r.ID).Status)
	require.ErrorIs(t, s.StepResolve(ctx, r.ID, "nap", catalog.Resolution{Outcome: catalog.OutcomeSucceeded}), catalog.ErrRunState)
	makeDue(t, ctx, s, r.ID, "nap")
	n, err = s.WakeDue(ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestSleepAlreadyDue: a sleep whose end has passed when it suspends succeeds at once.
func TestSleepAlreadyDue(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "nap", MaxAttempts: 1}})
	c := claimAll(t, ctx, s)["nap"]
	require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSleep, Until: time.Now().Add(-time.Minute)}))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
}

// TestSignals: a signal sent before its step waits is buffered, in order; one sent
// while it waits completes it; a repeat of an idempotency key is applied once; a
// finished run takes none.
func TestSignals(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	// first and second both wait for "go", second after first; late waits for "late".
	r := newRun(t, ctx, s, []catalog.NewStep{{Key: "first", MaxAttempts: 1}, {Key: "second", Needs: []string{"first"}, MaxAttempts: 1},
		{Key: "late", MaxAttempts: 1}})
	send := func(name, payload, key string) *catalog.SignalResult {
		t.Helper()
		res, err := s.SignalSend(ctx, &catalog.Signal{RunID: r.ID, Name: name, Payload: json.RawMessage(payload), IdempotencyKey: key, Actor: "alice"})
		require.NoError(t, err)
		return res
	}
	output := func(key string) string {
		t.Helper()
		st, err := s.StepGet(ctx, r.ID, key)
		require.NoError(t, err)
		return string(st.Output)
	}

	// Before: buffered, in order; the repeat is the same signal.
	a := send("go", `{"n":1}`, "k1")
	require.Nil(t, a.Step)
	require.False(t, a.Duplicate)
	again := send("go", `{ "n": 1 }`, "k1")
	require.True(t, again.Duplicate)
	require.Equal(t, a.Seq, again.Seq)
	// The key with another payload is refused, and applies nothing.
	_, err := s.SignalSend(ctx, &catalog.Signal{RunID: r.ID, Name: "go", Payload: json.RawMessage(`{"n":"other"}`), IdempotencyKey: "k1", Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrIdempotencyMismatch)
	b := send("go", `{"n":2}`, "k2")
	require.Greater(t, b.Seq, a.Seq)
	typ, data := lastEventData(t, ctx, s, r.ID)
	require.Equal(t, catalog.EventSignalReceived, typ)
	require.Equal(t, "alice", data["actor"])
	require.Equal(t, "go", data["name"])

	// The first step takes the oldest at once, without suspending.
	claimed := claimAll(t, ctx, s)
	require.NoError(t, s.StepSuspend(ctx, lease(claimed["first"]), catalog.Wait{Kind: catalog.WaitSignal, Name: "go"}))
	require.Equal(t, catalog.StepSucceeded, stepStatus(t, ctx, s, r.ID, "first"))
	require.JSONEq(t, `{"n":1}`, output("first"))
	// The late one waits: nothing buffered for it.
	require.NoError(t, s.StepSuspend(ctx, lease(claimed["late"]), catalog.Wait{Kind: catalog.WaitSignal, Name: "late"}))
	require.Equal(t, catalog.StepSuspended, stepStatus(t, ctx, s, r.ID, "late"))
	// The second takes the next.
	second := claimAll(t, ctx, s)["second"]
	require.NoError(t, s.StepSuspend(ctx, lease(second), catalog.Wait{Kind: catalog.WaitSignal, Name: "go"}))
	require.JSONEq(t, `{"n":2}`, output("second"))
	// A signal nobody waits for any more stays buffered; the run goes on.
	require.Nil(t, send("go", `{"n":3}`, "").Step)

	// During: the waiting step takes it; its repeat changes nothing.
	during := send("late", `"now"`, "k3")
	require.NotNil(t, during.Step)
	require.Equal(t, "late", *during.Step)
	require.JSONEq(t, `"now"`, output("late"))
	repeat := send("late", `"now"`, "k3")
	require.True(t, repeat.Duplicate)
	require.Equal(t, during.Seq, repeat.Seq)
	require.JSONEq(t, `"now"`, output("late"))
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)

	// A finished run takes no more signals (a repeat still answers).
	_, err = s.SignalSend(ctx, &catalog.Signal{RunID: r.ID, Name: "late", Payload: json.RawMessage(`1`), Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrRunFinished)
	require.True(t, send("late", `"now"`, "k3").Duplicate)
	_, err = s.SignalSend(ctx, &catalog.Signal{RunID: uuid.New(), Name: "late", Payload: json.RawMessage(`1`), Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// TestSignalsConcurrent: many signals with the same key sent at once are applied
// once; distinct ones are each taken by one waiting step.
func TestSignalsConcurrent(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	const waiters = 8
	var steps []catalog.NewStep
	for i := range waiters {
		steps = append(steps, catalog.NewStep{Key: "w" + string(rune('a'+i)), MaxAttempts: 1})
	}
	r := newRun(t, ctx, s, steps)
	for _, c := range claimAll(t, ctx, s) {
		require.NoError(t, s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSignal, Name: "go"}))
	}
	var g errgroup.Group
	for i := range 2 * waiters {
		g.Go(func() error {
			_, err := s.SignalSend(ctx, &catalog.Signal{RunID: r.ID, Name: "go", Payload: json.RawMessage(`1`),
				IdempotencyKey: "k" + string(rune('a'+i%waiters)), Actor: "alice"})
			return err
		})
	}
	require.NoError(t, g.Wait())
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
	var stored int
	require.NoError(t, s.DB().GetContext(ctx, &stored, `SELECT count(*) FROM signals WHERE run_id = $1`, r.ID))
	require.Equal(t, waiters, stored)
}

// TestSignalMeetsSuspend: a signal sent while its step suspends is never lost:
// either the suspension finds it buffered or the signal finds the step suspended.
// (Before migration 00017, each missed the other's uncommitted row now and then,
// and the step waited for good.)
func TestSignalMeetsSuspend(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	const rounds = 40
	for i := range rounds {
		r := newRun(t, ctx, s, []catalog.NewStep{{Key: "wait", MaxAttempts: 1}})
		c := claimAll(t, ctx, s)["wait"]
		start := make(chan struct{})
		var g errgroup.Group
		g.Go(func() error {
			<-start
			return s.StepSuspend(ctx, lease(c), catalog.Wait{Kind: catalog.WaitSignal, Name: "go"})
		})
		g.Go(func() error {
			<-start
			_, err := s.SignalSend(ctx, &catalog.Signal{RunID: r.ID, Name: "go", Payload: json.RawMessage(`1`), Actor: "alice"})
			return err
		})
		close(start)
		require.NoError(t, g.Wait())
		require.Equal(t, catalog.StepSucceeded, stepStatus(t, ctx, s, r.ID, "wait"), "round %d", i)
	}
}
