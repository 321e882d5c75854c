package catalog_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// succeeded is the finish of a successful attempt.
func succeeded(c catalog.Claimed, output string) *catalog.StepFinishParams {
	return &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken,
		Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(output)}
}

// The finish of a success leases the dependents it made ready to the finishing
// dispatcher, as a claim would: fresh tokens, attempt rows, step.started events,
// the upstream outputs as deps; up to the room it has.
func TestStepFinishClaimLeasesDependents(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, diamond(1))
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	next := &catalog.ClaimNext{Owner: "d1", Limit: 10, TTL: time.Minute}

	res, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `{"v":"A"}`)}, next)
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.Len(t, claimed, 2)
	byKey := map[string]catalog.Claimed{}
	for _, c := range claimed {
		byKey[c.Key] = c
		require.Equal(t, run.ID, c.RunID)
		require.Equal(t, 1, c.Attempt)
		require.Greater(t, c.LeaseToken, a.LeaseToken)
		require.JSONEq(t, `{"a":{"v":"A"}}`, string(c.Deps))
		require.JSONEq(t, `{"x":1}`, string(c.Input))
	}
	require.Equal(t, map[string]string{"a": "succeeded", "b": "running", "c": "running", "d": "waiting"}, statuses(t, ctx, s, run.ID))
	at, err := s.AttemptList(ctx, run.ID, "b")
	require.NoError(t, err)
	require.Len(t, at, 1)
	require.Equal(t, "d1", at[0].Dispatcher)

	// d waits for c: finishing b leases nothing. Finishing c leases d, within the
	// room given.
	_, claimed, err = s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(byKey["b"], `1`)}, next)
	require.NoError(t, err)
	require.Empty(t, claimed)
	_, claimed, err = s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(byKey["c"], `2`)},
		&catalog.ClaimNext{Owner: "d2", Limit: 1, TTL: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, "d", claimed[0].Key)
	require.JSONEq(t, `{"b":1,"c":2}`, string(claimed[0].Deps))

	// The lease is a lease: the old token of c is fenced, the new one finishes d
	// and the run.
	require.ErrorIs(t, finish(t, ctx, s, byKey["c"], catalog.OutcomeSucceeded, false, `3`), catalog.ErrLeaseLost)
	require.NoError(t, finish(t, ctx, s, claimed[0], catalog.OutcomeSucceeded, false, `4`))
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunSucceeded, r.Status)
	events, err := s.EventList(ctx, run.ID, 0, 1000)
	require.NoError(t, err)
	started := 0
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq)
		if e.Type == catalog.EventStepStarted {
			started++
		}
	}
	require.Equal(t, 4, started)
	require.Equal(t, r.Revision, events[len(events)-1].Seq)
}

// A dependent goes to the finishing dispatcher only when it is simple to claim
// and no other step waits: otherwise it stays ready for a claim, which orders
// steps by priority and age and applies limits and placement.
func TestStepFinishClaimLeavesOthersToTheClaim(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	chain := []catalog.NewStep{{Key: "a", MaxAttempts: 1}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}}
	next := &catalog.ClaimNext{Owner: "d1", Tags: []string{"cpu"}, Limit: 10, TTL: time.Minute}
	for _, tc := range []struct {
		name string
		set  string // applied to step b before a finishes
	}{
		{"concurrency limit", `conc_name = 'n', conc_key = 'k', conc_limit = 5`},
		{"rate limit", `rate_name = 'n', rate_key = 'k', rate_limit = 5, rate_per_s = 1`},
		{"runs_on another dispatcher", `runs_on = '{gpu}'`},
		{"held", `held = true`},
		{"condition to decide", `condition = 'pending'`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := newRun(t, ctx, s, chain)
			a := claimKeys(t, ctx, s, "d1", 1)["a"]
			_, err := s.DB().ExecContext(ctx, `UPDATE steps SET `+tc.set+` WHERE run_id = $1 AND key = 'b'`, run.ID)
			require.NoError(t, err)
			_, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `1`)}, next)
			require.NoError(t, err)
			require.Empty(t, claimed)
			require.Equal(t, "ready", statuses(t, ctx, s, run.ID)["b"])
			_, err = s.DB().ExecContext(ctx, `UPDATE steps SET status = 'canceled' WHERE run_id = $1 AND key = 'b'`, run.ID)
			require.NoError(t, err)
		})
	}

	// A step that was ready before goes first: b is left to the claim.
	first := newRun(t, ctx, s, chain)
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	older := newRun(t, ctx, s, []catalog.NewStep{{Key: "x", MaxAttempts: 1}})
	_, claimed, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `1`)}, next)
	require.NoError(t, err)
	require.Empty(t, claimed)
	got, err := s.StepClaim(ctx, "d1", 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, older.ID, got[0].RunID)
	require.Equal(t, "ready", statuses(t, ctx, s, first.ID)["b"])

	// No room, no lease.
	b := claimKeys(t, ctx, s, "d1", 1)["b"]
	require.Equal(t, first.ID, b.RunID)
	third := newRun(t, ctx, s, chain)
	a = claimKeys(t, ctx, s, "d1", 1)["a"]
	_, claimed, err = s.StepFinishClaim(ctx, []*catalog.StepFinishParams{succeeded(a, `1`)}, &catalog.ClaimNext{Owner: "d1", TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.Equal(t, "ready", statuses(t, ctx, s, third.ID)["b"])
}

// A claim without limits among its candidates is one statement; it still says
// when the next token of a rate limit that ready steps wait for is in.
func TestClaimNextInWithoutLimitedCandidates(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	rateLimitedVersion(t, ctx, s, 1)
	flowRun(t, ctx, s, "rl", `{"acct":"a"}`)
	flowRun(t, ctx, s, "rl", `{"acct":"a"}`)
	claimed, next, err := s.StepClaimNext(ctx, "d1", nil, 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.InDelta(t, time.Hour.Seconds(), next.Seconds(), 5)

	// A server that has not claimed yet tries the one statement first: the step
	// left waits for a token, so it is no candidate.
	fresh := catalog.New(s.DB(), nil)
	claimed, next, err = fresh.StepClaimNext(ctx, "d2", nil, 10, time.Minute)
	require.NoError(t, err)
	require.Empty(t, claimed)
	require.InDelta(t, time.Hour.Seconds(), next.Seconds(), 5)
}
