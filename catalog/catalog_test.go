package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

type testBundle struct {
	store *catalog.Store
}

func setup(t *testing.T) (context.Context, *testBundle) {
	t.Helper()
	db := testenv.DB(t)
	return context.Background(), &testBundle{store: catalog.New(db, nil)}
}

func fakeDigest(s string) string {
	return "sha256:" + fmt.Sprintf("%064x", []byte(s))[:64]
}

func TestSchema(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	require.NoError(t, s.CheckSchema(ctx))
	states, err := s.MigrationStatus(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, states)
	require.True(t, states[0].Applied)
	require.Equal(t, "00001_catalog.sql", states[0].Name)

	// A migration applied by a newer binary makes the schema "ahead".
	_, err = s.DB().ExecContext(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`)
	require.NoError(t, err)
	require.ErrorIs(t, s.CheckSchema(ctx), catalog.ErrSchemaAhead)
	_, err = s.Migrate(ctx, nil)
	require.ErrorIs(t, err, catalog.ErrSchemaAhead)
}

func TestVersionRegisterConsecutive(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	const n = 20
	versions := make([]int, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			d := fakeDigest(fmt.Sprintf("bundle-%d", i))
			v, created, err := tb.store.VersionRegister(ctx, &catalog.VersionRegisterParams{
				Workflow: "wf", Digest: d, Size: 1, BlobKey: "k", Definition: json.RawMessage(`{}`), Fingerprint: d,
			})
			if err != nil {
				return err
			}
			if !created {
				return fmt.Errorf("bundle %d: not created", i)
			}
			versions[i] = v.Version
			return nil
		})
	}
	require.NoError(t, g.Wait())
	seen := map[int]bool{}
	for i := range versions {
		require.False(t, seen[versions[i]], "version %d given twice", versions[i])
		seen[versions[i]] = true
	}
	for v := 1; v <= n; v++ {
		require.True(t, seen[v], "version %d missing", v)
	}

	// latest names the highest: each registration moved it while holding the
	// workflow's row lock, so they moved it in the order of their numbers.
	w, err := tb.store.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, n, w.LatestVersion)

	// The same digest again is the same version, and latest again.
	d := fakeDigest("bundle-3")
	v, created, err := tb.store.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "wf", Digest: d, Size: 1, BlobKey: "k", Definition: json.RawMessage(`{}`), Fingerprint: d,
	})
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, versions[3], v.Version)
	w, err = tb.store.WorkflowGet(ctx, "wf")
	require.NoError(t, err)
	require.Equal(t, versions[3], w.LatestVersion)
}

// diamond: a → (b, c) → d
func diamond(maxAttempts int) []catalog.NewStep {
	return []catalog.NewStep{
		{Key: "a", MaxAttempts: maxAttempts},
		{Key: "b", Needs: []string{"a"}, MaxAttempts: maxAttempts},
		{Key: "c", Needs: []string{"a"}, MaxAttempts: maxAttempts},
		{Key: "d", Needs: []string{"b", "c"}, MaxAttempts: maxAttempts},
	}
}

func newRun(t *testing.T, ctx context.Context, s *catalog.Store, steps []catalog.NewStep) *catalog.Run {
	t.Helper()
	v := catalogtest.Version(t, s, "wf", steps...)
	run, created, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version, Input: json.RawMessage(`{"x":1}`)})
	require.NoError(t, err)
	require.True(t, created)
	return run
}

func statuses(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID) map[string]string {
	t.Helper()
	steps, err := s.StepList(ctx, id)
	require.NoError(t, err)
	out := map[string]string{}
	for _, st := range steps {
		out[st.Key] = string(st.Status)
	}
	return out
}

func claimKeys(t *testing.T, ctx context.Context, s *catalog.Store, owner string, want int) map[string]catalog.Claimed {
	t.Helper()
	claimed, err := s.StepClaim(ctx, owner, 100, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, want)
	out := map[string]catalog.Claimed{}
	for _, c := range claimed {
		out[c.Key] = c
	}
	return out
}

func finish(t *testing.T, ctx context.Context, s *catalog.Store, c catalog.Claimed, outcome catalog.Outcome, retryable bool, output string) error {
	t.Helper()
	p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: outcome, Retryable: retryable}
	if output != "" {
		p.Output = json.RawMessage(output)
	}
	if outcome != catalog.OutcomeSucceeded {
		p.Error = json.RawMessage(`{"message":"boom"}`)
	}
	return s.StepFinish(ctx, p)
}

func TestRunLifecycle(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, diamond(1))
	require.Equal(t, catalog.RunPending, run.Status)
	require.Equal(t, map[string]string{"a": "ready", "b": "waiting", "c": "waiting", "d": "waiting"}, statuses(t, ctx, s, run.ID))

	got := claimKeys(t, ctx, s, "d1", 1)
	a := got["a"]
	require.Equal(t, 1, a.Attempt)
	require.JSONEq(t, `{"x":1}`, string(a.Input))
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunRunning, r.Status)

	require.NoError(t, finish(t, ctx, s, a, catalog.OutcomeSucceeded, false, `{"v":"A"}`))
	got = claimKeys(t, ctx, s, "d1", 2)
	require.JSONEq(t, `{"a":{"v":"A"}}`, string(got["b"].Deps))

	// A terminal failure of b skips d; c still runs to the end; the run fails.
	require.NoError(t, finish(t, ctx, s, got["b"], catalog.OutcomeFailed, false, ""))
	require.Equal(t, "skipped", statuses(t, ctx, s, run.ID)["d"])
	r, err = s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunRunning, r.Status)
	require.NoError(t, finish(t, ctx, s, got["c"], catalog.OutcomeSucceeded, false, `1`))
	r, err = s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunFailed, r.Status)
	require.True(t, r.FinishedAt != nil)
	require.Contains(t, string(r.Error), `"step": "b"`)

	// Events are numbered 1..N without gaps and end with the run's final event.
	events, err := s.EventList(ctx, run.ID, 0, 1000)
	require.NoError(t, err)
	for i, e := range events {
		require.Equal(t, int64(i+1), e.Seq)
	}
	require.Equal(t, catalog.EventRunCreated, events[0].Type)
	require.Equal(t, catalog.EventRunFailed, events[len(events)-1].Type)
	require.Equal(t, r.Revision, events[len(events)-1].Seq)
}

func TestLeaseFencingAndSweep(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2}})
	claimed, err := s.StepClaim(ctx, "d1", 10, 50*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	first := claimed[0]

	// A wrong token writes nothing.
	bad := first
	bad.LeaseToken++
	require.ErrorIs(t, finish(t, ctx, s, bad, catalog.OutcomeSucceeded, false, `1`), catalog.ErrLeaseLost)
	require.ErrorIs(t, s.StepCheckpoint(ctx, catalog.Lease{RunID: run.ID, Key: "a", Token: bad.LeaseToken}, json.RawMessage(`1`), nil), catalog.ErrLeaseLost)

	// Within the grace after the database's start (here: 100 hours, longer than this
	// cluster has run) an expired lease is not swept, and the next sweep is due at
	// the grace's end.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		next, err := s.NextLeaseExpiry(ctx, 0)
		require.NoError(c, err)
		assert.True(c, time.Now().After(next))
	}, 5*time.Second, 10*time.Millisecond, "waiting for the 50ms lease to expire")
	const longGrace = 100 * time.Hour
	n, err := s.StepSweep(ctx, 10, longGrace)
	require.NoError(t, err)
	require.Zero(t, n, "swept within the grace after the database started")
	next, err := s.NextLeaseExpiry(ctx, longGrace)
	require.NoError(t, err)
	var started time.Time
	require.NoError(t, s.DB().GetContext(ctx, &started, `SELECT pg_postmaster_start_time()`))
	require.WithinDuration(t, started.Add(longGrace), next, time.Second, "next sweep due at the grace's end")
	require.Equal(t, "running", statuses(t, ctx, s, run.ID)["a"])

	// The lease expires; the sweeper interrupts the attempt and readies the step.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		n, err := s.StepSweep(ctx, 10, 0)
		require.NoError(c, err)
		assert.Equal(c, 1, n)
	}, 5*time.Second, 20*time.Millisecond, "waiting for the 50ms lease to expire")
	attempts, err := s.AttemptList(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.AttemptInterrupted, attempts[0].Status)
	require.Equal(t, "ready", statuses(t, ctx, s, run.ID)["a"])

	second := claimKeys(t, ctx, s, "d2", 1)["a"]
	require.Greater(t, second.LeaseToken, first.LeaseToken)
	// The stale dispatcher's completion is fenced out; the newer attempt's stands.
	require.ErrorIs(t, finish(t, ctx, s, first, catalog.OutcomeSucceeded, false, `"stale"`), catalog.ErrLeaseLost)
	held, err := s.LeaseExtend(ctx, "d1", []catalog.Lease{{RunID: run.ID, Key: "a", Token: first.LeaseToken}, {RunID: run.ID, Key: "a", Token: second.LeaseToken}}, time.Minute)
	require.NoError(t, err)
	require.Equal(t, map[int64]bool{second.LeaseToken: true}, held)
	require.NoError(t, finish(t, ctx, s, second, catalog.OutcomeSucceeded, false, `"fresh"`))
	st, err := s.StepGet(ctx, run.ID, "a")
	require.NoError(t, err)
	require.JSONEq(t, `"fresh"`, string(st.Output))
}

func TestRetryBudgetAndHandback(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2}})

	// A handed-back attempt does not count against max_attempts.
	c := claimKeys(t, ctx, s, "d1", 1)["a"]
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeHandback, true, ""))
	c = claimKeys(t, ctx, s, "d1", 1)["a"]
	require.Equal(t, 2, c.Attempt)
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeFailed, true, ""))
	c = claimKeys(t, ctx, s, "d1", 1)["a"]
	require.Equal(t, 3, c.Attempt)
	require.NoError(t, finish(t, ctx, s, c, catalog.OutcomeTimedOut, true, ""))
	require.Equal(t, "failed", statuses(t, ctx, s, run.ID)["a"])
	attempts, err := s.AttemptList(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Equal(t, []catalog.AttemptStatus{catalog.AttemptInterrupted, catalog.AttemptFailed, catalog.AttemptTimedOut},
		[]catalog.AttemptStatus{attempts[0].Status, attempts[1].Status, attempts[2].Status})
	require.False(t, attempts[0].Counted)
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunFailed, r.Status)
}

func TestRetryAtIsRespected(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 3}})
	c := claimKeys(t, ctx, s, "d1", 1)["a"]
	err := s.StepFinish(ctx, &catalog.StepFinishParams{RunID: c.RunID, Key: "a", LeaseToken: c.LeaseToken,
		Outcome: catalog.OutcomeFailed, Retryable: true, RetryIn: time.Hour, Error: json.RawMessage(`{"message":"x"}`)})
	require.NoError(t, err)
	claimKeys(t, ctx, s, "d1", 0)
	st, err := s.StepGet(ctx, c.RunID, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.StepReady, st.Status)
	require.WithinDuration(t, time.Now().Add(time.Hour), *st.ReadyAt, time.Minute)
}

func TestCancel(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	run := newRun(t, ctx, s, diamond(1))
	a := claimKeys(t, ctx, s, "d1", 1)["a"]
	require.NoError(t, s.RunCancel(ctx, run.ID, "user asked"))
	require.Equal(t, map[string]string{"a": "canceled", "b": "canceled", "c": "canceled", "d": "canceled"}, statuses(t, ctx, s, run.ID))
	attempts, err := s.AttemptList(ctx, run.ID, "a")
	require.NoError(t, err)
	require.Equal(t, catalog.AttemptCanceled, attempts[0].Status)
	// The dispatcher's late completion is fenced out.
	require.ErrorIs(t, finish(t, ctx, s, a, catalog.OutcomeSucceeded, false, `1`), catalog.ErrLeaseLost)
	r, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunCanceled, r.Status)
	require.ErrorIs(t, s.RunCancel(ctx, run.ID, ""), catalog.ErrRunFinished)
	require.ErrorIs(t, s.RunCancel(ctx, uuid.New(), ""), catalog.ErrNotFound)
}

func TestRunIdempotency(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	params := func(hash string) *catalog.RunCreateParams {
		return &catalog.RunCreateParams{Workflow: "wf", Version: v.Version,
			IdempotencyScope: "runs:wf", IdempotencyKey: "key-1", RequestHash: hash}
	}
	const n = 20
	ids := make([]uuid.UUID, n)
	created := make([]bool, n)
	var g errgroup.Group
	for i := range n {
		g.Go(func() error {
			r, c, err := s.RunCreate(ctx, params("h1"))
			if err != nil {
				return err
			}
			ids[i], created[i] = r.ID, c
			return nil
		})
	}
	require.NoError(t, g.Wait())
	nCreated := 0
	for i := range ids {
		require.Equal(t, ids[0], ids[i])
		if created[i] {
			nCreated++
		}
	}
	require.Equal(t, 1, nCreated)
	_, _, err := s.RunCreate(ctx, params("h2"))
	require.ErrorIs(t, err, catalog.ErrIdempotencyMismatch)
	require.ErrorIs(t, err, catalog.ErrConflict)
	runs, err := s.RunList(ctx, &catalog.RunListParams{Workflow: "wf", Limit: 100})
	require.NoError(t, err)
	require.Len(t, runs, 1)
}

func TestStepFinishBatch(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	var runs []uuid.UUID
	for i := 0; i < 3; i++ {
		runs = append(runs, newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 2}, {Key: "b", Needs: []string{"a"}, MaxAttempts: 1}}).ID)
	}
	claimed, err := s.StepClaim(ctx, "d1", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 3)
	byRun := map[uuid.UUID]catalog.Claimed{}
	for _, c := range claimed {
		byRun[c.RunID] = c
	}
	items := []*catalog.StepFinishParams{
		{RunID: runs[0], Key: "a", LeaseToken: byRun[runs[0]].LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`{"ok":1}`)},
		{RunID: runs[1], Key: "a", LeaseToken: byRun[runs[1]].LeaseToken, Outcome: catalog.OutcomeFailed, Retryable: true, RetryIn: time.Hour, Error: json.RawMessage(`{"message":"x"}`), LogKey: "logs/sha256/" + strings.Repeat("0", 64)},
		{RunID: runs[2], Key: "a", LeaseToken: byRun[runs[2]].LeaseToken + 1000, Outcome: catalog.OutcomeSucceeded},
	}
	res, err := s.StepFinishBatch(ctx, items)
	require.NoError(t, err)
	require.NoError(t, res[0])
	require.NoError(t, res[1])
	require.ErrorIs(t, res[2], catalog.ErrLeaseLost)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready"}, statuses(t, ctx, s, runs[0]))
	require.Equal(t, map[string]string{"a": "ready", "b": "waiting"}, statuses(t, ctx, s, runs[1]))
	require.Equal(t, map[string]string{"a": "running", "b": "waiting"}, statuses(t, ctx, s, runs[2]))
	st, err := s.StepGet(ctx, runs[0], "a")
	require.NoError(t, err)
	require.JSONEq(t, `{"ok":1}`, string(st.Output))
	at, err := s.AttemptList(ctx, runs[1], "a")
	require.NoError(t, err)
	require.True(t, at[0].LogKey != nil)
	require.JSONEq(t, `{"message":"x"}`, string(at[0].Error))
}
