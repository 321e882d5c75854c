package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// interrupt claims step key of run as owner with a lease that ends at once, and
// sweeps it as a dead dispatcher's: the attempt is recorded interrupted (code
// lease_expired), as when the server running it was SIGKILLed.
func interrupt(t *testing.T, ctx context.Context, s *catalog.Store, run uuid.UUID, key, owner string) {
	t.Helper()
	claimed, err := s.StepClaim(ctx, owner, 1, time.Millisecond)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, key, claimed[0].Key)
	require.Equal(t, run, claimed[0].RunID)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := s.StepSweep(ctx, 10, 0)
		require.NoError(c, err)
		assert.Equal(c, 1, n)
	}, 5*time.Second, 5*time.Millisecond, "waiting for the lease to expire")
}

// A server crash never fails a run: with max_attempts 1, an attempt whose
// dispatcher died is interrupted, uncounted, and the step runs again.
func TestInterruptionDoesNotUseAnAttempt(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})

	interrupt(t, ctx, s, run.ID, "a", "d1")
	require.Equal(t, "ready", statuses(t, ctx, s, run.ID)["a"])
	step, err := s.StepGet(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Equal(t, 0, step.CountedAttempts, "the interrupted attempt is given back")
	attempts, err := s.AttemptList(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, catalog.AttemptInterrupted, attempts[0].Status)
	require.False(t, attempts[0].Counted)

	// Its one counted attempt is still there: it succeeds on another server.
	c := claimKeys(t, ctx, s, "d2", 1)["a"]
	require.Equal(t, 2, c.Attempt)
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeSucceeded, false, `"ok"`))
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunSucceeded, r.Status)
}

// A handler that kills its dispatcher every time (a poison pill) fails its step
// after max_interruptions interruptions in a row, default 5, with code
// interrupted_too_often naming the count.
func TestInterruptedTooOften(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 3}})

	for i := 1; i < bundle.DefaultMaxInterruptions; i++ {
		interrupt(t, ctx, s, run.ID, "a", fmt.Sprintf("d%d", i))
		require.Equal(t, "ready", statuses(t, ctx, s, run.ID)["a"], "after interruption %d", i)
	}
	interrupt(t, ctx, s, run.ID, "a", "last")
	require.Equal(t, "failed", statuses(t, ctx, s, run.ID)["a"])
	step, err := s.StepGet(ctx, run.ID, "a")
	require.NoError(t, err)
	var e struct {
		Code          string `json:"code"`
		Message       string `json:"message"`
		Retryable     bool   `json:"retryable"`
		Interruptions int    `json:"interruptions"`
	}
	require.NoError(t, json.Unmarshal(step.LastError, &e))
	require.Equal(t, "interrupted_too_often", e.Code)
	require.Equal(t, bundle.DefaultMaxInterruptions, e.Interruptions)
	require.Contains(t, e.Message, fmt.Sprintf("interrupted %d times in a row", bundle.DefaultMaxInterruptions))
	require.False(t, e.Retryable)
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunFailed, r.Status)
}

// The bound is the step's retry policy's max_interruptions; interruptions count
// in a row: a counted failure between them starts the count again.
func TestMaxInterruptionsFromDefinition(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 3}})
	_, err := s.DB().ExecContext(ctx, `UPDATE workflow_versions SET definition = $1
		WHERE (workflow, version) = (SELECT workflow, version FROM runs WHERE id = $2)`,
		`{"steps": [{"key": "a", "retry": {"max_attempts": 3, "max_interruptions": 2}}]}`, run.ID)
	require.NoError(t, err)

	interrupt(t, ctx, s, run.ID, "a", "d1")
	// A failure of the handler itself, counted: the interruptions start again.
	c := claimKeys(t, ctx, s, "d2", 1)["a"]
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeFailed, true, ""))
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET ready_at = now() WHERE run_id = $1`, run.ID)
	require.NoError(t, err)
	interrupt(t, ctx, s, run.ID, "a", "d3")
	require.Equal(t, "ready", statuses(t, ctx, s, run.ID)["a"], "one interruption since the counted failure")
	interrupt(t, ctx, s, run.ID, "a", "d4")
	require.Equal(t, "failed", statuses(t, ctx, s, run.ID)["a"], "two in a row: the bound")
	step, err := s.StepGet(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Contains(t, string(step.LastError), "max_interruptions is 2")
	require.Equal(t, 1, step.CountedAttempts, "interruptions used none of max_attempts")
}

// bundle.DefaultMaxInterruptions is the catalog's default too.
func TestMaxInterruptionsDefault(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
	var n int
	require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT cairn_step_max_interruptions($1, 'a', NULL)`, run.ID))
	require.Equal(t, bundle.DefaultMaxInterruptions, n)
}

// A heartbeat waits for no row lock: a step whose row another transaction holds
// is skipped (still held, not extended), and the dispatcher's liveness keeps the
// sweepers from its lease until it is a grace past its expiry.
func TestHeartbeatSkipsLockedRows(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", MaxAttempts: 1}})
	claimed, err := s.StepClaim(ctx, "d1", 2, 200*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	leases := make([]catalog.Lease, 0, 2)
	var a catalog.Claimed
	for _, c := range claimed {
		leases = append(leases, catalog.Lease{RunID: c.RunID, Key: c.Key, Token: c.LeaseToken})
		if c.Key == "a" {
			a = c
		}
	}

	// Another transaction holds a's row.
	tx, err := s.DB().BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM steps WHERE run_id = $1 AND key = 'a' FOR UPDATE`, run.ID)
	require.NoError(t, err)

	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	held, err := s.LeaseExtend(hctx, "d1", leases, time.Minute)
	require.NoError(t, err, "the heartbeat does not wait for the lock")
	require.Len(t, held, 2, "both leases are still held")

	var aExpires, bExpires time.Time
	require.NoError(t, s.DB().GetContext(ctx, &aExpires, `SELECT lease_expires_at FROM steps WHERE run_id = $1 AND key = 'a'`, run.ID))
	require.NoError(t, s.DB().GetContext(ctx, &bExpires, `SELECT lease_expires_at FROM steps WHERE run_id = $1 AND key = 'b'`, run.ID))
	require.WithinDuration(t, a.LeaseExpiresAt, aExpires, time.Millisecond, "a's lease was skipped")
	require.True(t, bExpires.After(a.LeaseExpiresAt.Add(30*time.Second)), "b's lease was extended")
	require.NoError(t, tx.Rollback())

	// a's lease expires, but its owner is alive: not swept until a grace past it
	// (and not within the grace after the database's start: wait for that first).
	const grace = 2 * time.Second
	var started time.Time
	require.NoError(t, s.DB().GetContext(ctx, &started, `SELECT pg_postmaster_start_time()`))
	time.Sleep(max(time.Until(aExpires), time.Until(started.Add(grace))) + 50*time.Millisecond)
	n, err := s.StepSweep(ctx, 10, grace)
	require.NoError(t, err)
	require.Zero(t, n, "a live owner's lease is not swept at its expiry")
	next, err := s.NextLeaseExpiry(ctx, grace)
	require.NoError(t, err)
	require.WithinDuration(t, aExpires.Add(grace), next, 10*time.Millisecond, "the next sweep is due a grace past the expiry")
	time.Sleep(time.Until(next) + 50*time.Millisecond)
	n, err = s.StepSweep(ctx, 10, grace)
	require.NoError(t, err)
	require.Equal(t, 1, n, "swept once the grace past its expiry has passed")
}
