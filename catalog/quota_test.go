package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

// makeNamespace adds namespace ns to the catalog, as `cairn namespace create` does.
func makeNamespace(t *testing.T, ctx context.Context, s *catalog.Store, ns string) {
	t.Helper()
	_, err := s.DB().ExecContext(ctx, `INSERT INTO namespaces (name, created_by, updated_by) VALUES ($1, 'test', 'test')`, ns)
	require.NoError(t, err)
}

// setQuota sets the running_steps and runs_per_minute quotas of ns (0 clears one).
func setQuota(t *testing.T, ctx context.Context, s *catalog.Store, ns string, running, perMinute int) *catalog.NamespaceQuotas {
	t.Helper()
	q, err := s.QuotaSet(ctx, ns, catalog.QuotaSetParams{
		RunningSteps: catalog.QuotaChange{Change: true, Limit: running}, RunsPerMinute: catalog.QuotaChange{Change: true, Limit: perMinute},
	}, "alice")
	require.NoError(t, err)
	return q
}

// runningIn counts the running steps of namespace ns's runs, from the rows.
func runningIn(t *testing.T, ctx context.Context, s *catalog.Store, ns string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.status = 'running' AND cairn_namespace(r.workflow) = $1`, ns))
	return n
}

// claimQuota claims up to 100 steps for owner and returns them.
func claimQuota(t *testing.T, ctx context.Context, s *catalog.Store, owner string) []catalog.Claimed {
	t.Helper()
	claimed, err := s.StepClaim(ctx, owner, 100, time.Minute)
	require.NoError(t, err)
	return claimed
}

// TestQuotaRunningSteps: a namespace's running_steps quota bounds its running
// steps across claims, whatever else is ready (default's steps and another
// namespace's run as before); a waiting step says the quota holds it; a quota
// lowered while steps run holds back the next claims only; a lease swept (its
// dispatcher died) frees its slot, with no counter to repair; a cleared quota
// lets the rest start.
func TestQuotaRunningSteps(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	makeNamespace(t, ctx, s, "b")
	for _, wf := range []string{"a/wf", "b/wf", "wf"} {
		definitionVersion(t, s, wf, `{"steps":[{"key":"s","needs":[]}]}`)
	}
	setQuota(t, ctx, s, "a", 2, 0)
	var aRuns []uuid.UUID
	for range 6 {
		aRuns = append(aRuns, flowRun(t, ctx, s, "a/wf", `{}`))
	}
	for range 3 {
		flowRun(t, ctx, s, "b/wf", `{}`)
		flowRun(t, ctx, s, "wf", `{}`)
	}

	claimed := claimQuota(t, ctx, s, "d1")
	require.Len(t, claimed, 2+3+3, "two of a, every step of b and of default")
	require.Equal(t, 2, runningIn(t, ctx, s, "a"))
	require.Empty(t, claimQuota(t, ctx, s, "d2"))

	// A waiting step of a says why.
	var waiting uuid.UUID
	for _, id := range aRuns {
		if stepStatus(t, ctx, s, id, "s") == catalog.StepReady {
			waiting = id
		}
	}
	blocked, err := s.StepsBlocked(ctx, waiting)
	require.NoError(t, err)
	require.Equal(t, catalog.BlockedBy{Kind: "quota", Name: "running_steps", Key: "a", InUse: 2, Limit: 2}, blocked["s"])
	q, err := s.QuotaGet(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, 2, q.Running)
	require.Equal(t, 6, q.RunsLastMinute)

	var held []catalog.Claimed
	for _, c := range claimed {
		if r, err := s.RunGet(ctx, c.RunID); err == nil && r.Workflow == "a/wf" {
			held = append(held, c)
		}
	}
	require.Len(t, held, 2)

	// Lowered to 1 while two run: both keep running; one finishing frees nothing
	// to claim (one runs, the quota); the second finishing lets one start.
	setQuota(t, ctx, s, "a", 1, 0)
	require.Equal(t, 2, runningIn(t, ctx, s, "a"))
	require.NoError(t, finish(t, ctx, s, held[0], catalog.OutcomeSucceeded, false, `{}`))
	require.Empty(t, claimQuota(t, ctx, s, "d1"))
	require.NoError(t, finish(t, ctx, s, held[1], catalog.OutcomeSucceeded, false, `{}`))
	next := claimQuota(t, ctx, s, "d1")
	require.Len(t, next, 1)

	// Its dispatcher dies: the lease expires and is swept, and the slot is free.
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET lease_expires_at = now() - interval '1 hour'
WHERE run_id = $1 AND key = 's'`, next[0].RunID)
	require.NoError(t, err)
	n, err := s.StepSweep(ctx, 100, 0)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 0, runningIn(t, ctx, s, "a"))
	require.Len(t, claimQuota(t, ctx, s, "d1"), 1)

	// Cleared: the rest of a starts.
	setQuota(t, ctx, s, "a", 0, 0)
	require.Len(t, claimQuota(t, ctx, s, "d1"), 3)
	require.Equal(t, 4, runningIn(t, ctx, s, "a"))
}

// TestQuotaRunningStepsWithLimits: the claim that takes turns between
// concurrency keys (a transaction: limit_keys has rows) applies the quota as
// well, together with each step's concurrency limit.
func TestQuotaRunningStepsWithLimits(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	flowVersion(t, s, "a/limited", `{"name":"k","key":"input.k","limit":3}`)
	definitionVersion(t, s, "a/plain", `{"steps":[{"key":"s","needs":[]}]}`)
	setQuota(t, ctx, s, "a", 4, 0)
	for i := range 8 {
		flowRun(t, ctx, s, "a/limited", fmt.Sprintf(`{"k":"%d"}`, i%2))
		flowRun(t, ctx, s, "a/plain", `{}`)
	}
	claimed := claimQuota(t, ctx, s, "d1")
	require.Len(t, claimed, 4)
	require.Equal(t, 4, runningIn(t, ctx, s, "a"))
	for _, kv := range runningPerKey(t, ctx, s) {
		require.LessOrEqual(t, kv, 3)
	}
	require.Empty(t, claimQuota(t, ctx, s, "d2"))
}

// TestQuotaFinishClaim: a finish that leases its run's next steps
// (StepFinishClaim) leaves those of a namespace with a quota to the claim, which
// counts the namespace's slots: with the quota lowered under the steps running,
// a finish starts nothing more.
func TestQuotaFinishClaim(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	_, _, err := s.VersionRegister(ctx, &catalog.VersionRegisterParams{Workflow: "a/chain", Digest: fakeDigest("a/chain"), Size: 1,
		BlobKey: "k", Definition: []byte(`{"steps":[]}`), Fingerprint: fakeDigest("a/chain"),
		Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}, {Key: "t", Needs: []string{"s"}, MaxAttempts: 1}}})
	require.NoError(t, err)
	setQuota(t, ctx, s, "a", 2, 0)
	flowRun(t, ctx, s, "a/chain", `{}`)
	flowRun(t, ctx, s, "a/chain", `{}`)
	claimed := claimQuota(t, ctx, s, "d1")
	require.Len(t, claimed, 2)
	setQuota(t, ctx, s, "a", 1, 0)
	_, next, err := s.StepFinishClaim(ctx, []*catalog.StepFinishParams{finishParams(claimed[0], catalog.OutcomeSucceeded, false, 0)},
		&catalog.ClaimNext{Owner: "d1", Limit: 10, TTL: time.Minute})
	require.NoError(t, err)
	require.Empty(t, next, "the dependent is left to the claim")
	require.Equal(t, 1, runningIn(t, ctx, s, "a"))
	require.Empty(t, claimQuota(t, ctx, s, "d1"), "one runs: the quota")
	require.NoError(t, finish(t, ctx, s, claimed[1], catalog.OutcomeSucceeded, false, `{}`))
	require.Len(t, claimQuota(t, ctx, s, "d1"), 1)
}

// TestQuotaRunningStepsConcurrentClaims: claimers racing on many connections never
// start more steps of a namespace than its quota, and its usage counted under the
// lock is exact.
func TestQuotaRunningStepsConcurrentClaims(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	definitionVersion(t, s, "a/wf", `{"steps":[{"key":"s","needs":[]}]}`)
	setQuota(t, ctx, s, "a", 3, 0)
	for range 30 {
		flowRun(t, ctx, s, "a/wf", `{}`)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var all []catalog.Claimed
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.StepClaim(ctx, fmt.Sprintf("d%d", i), 4, time.Minute)
			if err != nil {
				t.Error(err)
			}
			mu.Lock()
			all = append(all, c...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	require.Len(t, all, 3)
	require.Equal(t, 3, runningIn(t, ctx, s, "a"))
}

// TestQuotaRunsPerMinute: a namespace's runs_per_minute quota refuses the run
// over it, in the statement or transaction that would create it, with a
// QuotaError that names the quota and says when to try again; creations racing
// are serialized (never more than the quota); a rerun is a new run and is
// refused alike; default and other namespaces are not bound.
func TestQuotaRunsPerMinute(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	makeNamespace(t, ctx, s, "b")
	for _, wf := range []string{"a/wf", "b/wf", "wf"} {
		definitionVersion(t, s, wf, `{"steps":[{"key":"s","needs":[]}]}`)
	}
	flowVersion(t, s, "a/limited", `{"name":"k","key":"input.k","limit":3}`)
	setQuota(t, ctx, s, "a", 0, 5)

	// Ten at once: five are created, five refused.
	var wg sync.WaitGroup
	errs := make([]error, 10)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "a/wf"})
		}()
	}
	wg.Wait()
	refused := 0
	for _, err := range errs {
		if err == nil {
			continue
		}
		var qe *catalog.QuotaError
		require.ErrorAs(t, err, &qe)
		require.ErrorIs(t, err, catalog.ErrQuotaExceeded)
		require.Equal(t, "a", qe.Namespace)
		require.Equal(t, "runs_per_minute", qe.Quota)
		require.Equal(t, 5, qe.Limit)
		require.Greater(t, qe.RetryAfter, time.Duration(0))
		require.LessOrEqual(t, qe.RetryAfter, time.Minute)
		refused++
	}
	require.Equal(t, 5, refused)

	// Another workflow of a, with flow settings (created in a transaction), and an
	// idempotent start: refused alike.
	_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "a/limited", Input: []byte(`{"k":"x"}`)})
	require.ErrorIs(t, err, catalog.ErrQuotaExceeded)
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "a/wf", IdempotencyKey: "k1", IdempotencyScope: "a/wf", RequestHash: "h"})
	require.ErrorIs(t, err, catalog.ErrQuotaExceeded)

	// default and b are not bound.
	for range 7 {
		flowRun(t, ctx, s, "wf", `{}`)
		flowRun(t, ctx, s, "b/wf", `{}`)
	}

	// A rerun of a run of a is a new run of a: refused.
	var src uuid.UUID
	require.NoError(t, s.DB().GetContext(ctx, &src, `SELECT id FROM runs WHERE workflow = 'a/wf' LIMIT 1`))
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET status = 'failed', finished_at = now() WHERE id = $1`, src)
	require.NoError(t, err)
	_, _, _, err = s.RunRerun(ctx, &catalog.RunRerunParams{Source: src, FromStep: "s", Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrQuotaExceeded)

	// The window moves on: runs a minute old no longer count.
	_, err = s.DB().ExecContext(ctx, `UPDATE runs SET created_at = created_at - interval '61 seconds' WHERE workflow = 'a/wf'`)
	require.NoError(t, err)
	flowRun(t, ctx, s, "a/wf", `{}`)
	run, _, _, err := s.RunRerun(ctx, &catalog.RunRerunParams{Source: src, FromStep: "s", Actor: "alice"})
	require.NoError(t, err)
	var ns *string
	require.NoError(t, s.DB().GetContext(ctx, &ns, `SELECT quota_ns FROM steps WHERE run_id = $1`, run.ID))
	require.Equal(t, "a", *ns, "a rerun's steps carry the namespace")
}

// TestQuotaSet: the default namespace takes no quota; an unknown namespace is not
// found; a change keeps the quota it does not name; the writer is recorded.
func TestQuotaSet(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	_, err := s.QuotaSet(ctx, "default", catalog.QuotaSetParams{RunningSteps: catalog.QuotaChange{Change: true, Limit: 3}}, "alice")
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	_, err = s.QuotaSet(ctx, "nope", catalog.QuotaSetParams{RunningSteps: catalog.QuotaChange{Change: true, Limit: 3}}, "alice")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.QuotaGet(ctx, "nope")
	require.ErrorIs(t, err, catalog.ErrNotFound)
	_, err = s.QuotaSet(ctx, "a", catalog.QuotaSetParams{}, "alice")
	require.ErrorIs(t, err, catalog.ErrInvalidInput)

	makeNamespace(t, ctx, s, "a")
	q := setQuota(t, ctx, s, "a", 5, 100)
	require.Equal(t, 5, *q.RunningSteps)
	q, err = s.QuotaSet(ctx, "a", catalog.QuotaSetParams{RunsPerMinute: catalog.QuotaChange{Change: true}}, "bob")
	require.NoError(t, err)
	require.Equal(t, 5, *q.RunningSteps)
	require.Nil(t, q.RunsPerMinute)
	require.Equal(t, "bob", q.UpdatedBy)
	require.False(t, errors.Is(err, catalog.ErrQuotaExceeded))
}

// TestQuotaRunsPerMinuteFlows: what creates runs on its own is held by the quota
// too, and says so: a schedule's fire over it is skipped (counted as skipped,
// with a schedule.quota_skipped event; the pass goes on, the next fire comes at
// its time); an event's trigger starts no run and the event's outcome names the
// quota (the event itself is received).
func TestQuotaRunsPerMinuteFlows(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	makeNamespace(t, ctx, s, "a")
	setQuota(t, ctx, s, "a", 0, 2)

	every := bundle.ScheduleDefinition{Name: "tick", Cron: "* * * * * *", Timezone: "UTC", Overlap: bundle.OverlapAllow,
		Catchup: bundle.Duration(time.Hour), CatchupMS: 3600000}
	deployDef(t, s, "a/wf", every)
	deployDef(t, s, "wf", every)
	for _, wf := range []string{"a/wf", "wf"} {
		setNextFire(t, s, schedulesByName(t, s, wf)["tick"].ID, 5*time.Second)
	}
	res, err := s.ScheduleFire(ctx, &catalog.ScheduleFireParams{Next: nextFire})
	require.NoError(t, err)
	require.Empty(t, res.Failed)
	require.Len(t, scheduledRuns(t, s, "a/wf", "tick"), 2, "the quota's two")
	require.GreaterOrEqual(t, len(scheduledRuns(t, s, "wf", "tick")), 6, "default is not bound")
	sc := schedulesByName(t, s, "a/wf")["tick"]
	require.GreaterOrEqual(t, sc.Skipped, int64(4))
	require.True(t, sc.NextFireAt.After(time.Now().Add(-time.Second)), "the schedule moved on")
	var skipped []string
	require.NoError(t, s.DB().SelectContext(ctx, &skipped, `SELECT data::text FROM schedule_events
WHERE schedule_id = $1 AND type = $2`, sc.ID, catalog.EventScheduleQuotaSkipped))
	require.Len(t, skipped, int(sc.Skipped))
	require.Contains(t, skipped[0], `"quota": "runs_per_minute"`)

	// An event of a: received; its trigger starts nothing, and says why.
	triggerVersion(t, s, "a/sync", `[{"event":"a/doc.changed"}]`)
	o := send(t, s, "a/doc.changed", "e1", `{"doc":"x"}`)
	require.Empty(t, o.Started)
	require.Len(t, o.Errors, 1)
	require.Equal(t, "triggers[0]", o.Errors[0].Where)
	require.Contains(t, o.Errors[0].Message, "runs_per_minute")
}
