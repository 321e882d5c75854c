package catalog_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// startRuns creates n runs of workflow (one step each) and returns their ids.
func startRuns(ctx context.Context, t *testing.T, s *catalog.Store, workflow string, n int) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range n {
		r, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: workflow})
		require.NoError(t, err)
		ids[i] = r.ID
	}
	return ids
}

// countEvents returns how many events of type typ each run has.
func countEvents(ctx context.Context, t *testing.T, s *catalog.Store, typ catalog.EventType) map[uuid.UUID]int {
	t.Helper()
	rows, err := s.DB().QueryContext(ctx, `SELECT run_id, count(*) FROM events WHERE type = $1 GROUP BY run_id`, typ)
	require.NoError(t, err)
	defer rows.Close()
	out := map[uuid.UUID]int{}
	for rows.Next() {
		var id uuid.UUID
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		out[id] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TestOperationCancelExactlyOnce: a bulk cancel walks the runs its filter matched
// at creation in batches, skips the ones that already ended (saying why), leaves
// later runs and other workflows alone, and acts on each run once even when its
// first holder dies after a batch and another server takes the operation over.
func TestOperationCancelExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "bulk", catalog.NewStep{Key: "a", MaxAttempts: 1})
	catalogtest.Version(t, s, "other", catalog.NewStep{Key: "a", MaxAttempts: 1})
	ids := startRuns(ctx, t, s, "bulk", 7)
	others := startRuns(ctx, t, s, "other", 2)
	// One run has ended already: it is skipped.
	require.NoError(t, s.RunCancel(ctx, ids[3], "by hand"))

	op, err := s.OperationCreate(ctx, &catalog.OperationCreateParams{
		Action: catalog.ActionCancel, Filter: catalog.RunListParams{Workflow: "bulk"}, Actor: "alice",
	})
	require.NoError(t, err)
	require.Equal(t, 7, op.Total)
	require.Equal(t, catalog.OperationRunning, op.Status)
	late := startRuns(ctx, t, s, "bulk", 1) // after the operation: not its business

	// The first server takes the operation, does one batch, and dies.
	held, err := s.OperationClaim(ctx, "server-1", 300*time.Millisecond)
	require.NoError(t, err)
	require.NotNil(t, held)
	require.Equal(t, op.ID, held.ID)
	again, err := s.OperationClaim(ctx, "server-2", time.Minute)
	require.NoError(t, err)
	require.Nil(t, again, "a held operation is not claimed twice")
	step, err := s.OperationStep(ctx, op.ID, "server-1", 3, 300*time.Millisecond)
	require.NoError(t, err)
	require.Equal(t, 3, step.Processed)
	require.Equal(t, catalog.OperationRunning, step.Status)

	// Its lease expires; the second server takes over from the cursor.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		held, err := s.OperationClaim(ctx, "server-2", time.Minute)
		require.NoError(c, err)
		require.NotNil(c, held)
	}, 10*time.Second, 50*time.Millisecond)
	_, err = s.OperationStep(ctx, op.ID, "server-1", 3, time.Minute)
	require.ErrorIs(t, err, catalog.ErrLeaseLost, "the first holder is fenced out")
	for step.Status == catalog.OperationRunning {
		step, err = s.OperationStep(ctx, op.ID, "server-2", 3, time.Minute)
		require.NoError(t, err)
	}
	require.Equal(t, catalog.OperationSucceeded, step.Status)
	require.Equal(t, 7, step.Processed)
	require.Equal(t, 6, step.Applied)
	require.Equal(t, 1, step.Skipped)
	require.NotNil(t, step.FinishedAt)

	canceled := countEvents(ctx, t, s, catalog.EventRunCanceled)
	for _, id := range ids {
		require.Equal(t, 1, canceled[id], "run %s canceled once", id)
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, catalog.RunCanceled, r.Status)
	}
	for _, id := range append(others, late...) {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, catalog.RunPending, r.Status, "run %s is not the operation's", id)
	}
	runs, err := s.OperationRuns(ctx, op.ID, uuid.Nil, 100)
	require.NoError(t, err)
	require.Len(t, runs, 7)
	for _, r := range runs {
		if r.RunID == ids[3] {
			require.Equal(t, "skipped", r.Outcome)
			require.Contains(t, r.Detail, "already ended")
		} else {
			require.Equal(t, "applied", r.Outcome)
		}
	}
	got, err := s.OperationGet(ctx, op.ID)
	require.NoError(t, err)
	require.Equal(t, step.Processed, got.Processed)
}

func TestOperationUnknownAction(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	_, err := tb.store.OperationCreate(ctx, &catalog.OperationCreateParams{Action: "explode", Actor: "alice"})
	require.ErrorIs(t, err, catalog.ErrInvalidInput)
	_, err = tb.store.OperationGet(ctx, uuid.New())
	require.ErrorIs(t, err, catalog.ErrNotFound)
}

// runOperation creates an operation and works it to the end as one server.
func runOperation(ctx context.Context, t *testing.T, s *catalog.Store, action catalog.OperationAction, filter catalog.RunListParams) (*catalog.Operation, map[uuid.UUID]catalog.OperationRun) {
	t.Helper()
	op, err := s.OperationCreate(ctx, &catalog.OperationCreateParams{Action: action, Filter: filter, Actor: "alice"})
	require.NoError(t, err)
	held, err := s.OperationClaim(ctx, "server", time.Minute)
	require.NoError(t, err)
	require.NotNil(t, held)
	for op.Status == catalog.OperationRunning {
		op, err = s.OperationStep(ctx, held.ID, "server", 2, time.Minute)
		require.NoError(t, err)
	}
	runs, err := s.OperationRuns(ctx, op.ID, uuid.Nil, 100)
	require.NoError(t, err)
	byRun := map[uuid.UUID]catalog.OperationRun{}
	for _, r := range runs {
		byRun[r.RunID] = r
	}
	return op, byRun
}

// TestOperationPauseResumeRetry: a bulk pause pauses the runs that are going and
// skips the ones it cannot or need not pause (ended; paused by an operator
// already); a bulk resume releases them; a bulk retry retries the failed runs and
// skips the others, naming the reason.
func TestOperationPauseResumeRetry(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "bulk", catalog.NewStep{Key: "a", MaxAttempts: 1})
	ids := startRuns(ctx, t, s, "bulk", 5)
	require.NoError(t, s.RunCancel(ctx, ids[0], "by hand"))
	_, err := s.RunPause(ctx, ids[1], "bob", "")
	require.NoError(t, err)

	op, byRun := runOperation(ctx, t, s, catalog.ActionPause, catalog.RunListParams{Workflow: "bulk"})
	require.Equal(t, 5, op.Processed)
	require.Equal(t, 3, op.Applied)
	require.Contains(t, byRun[ids[0]].Detail, "ended")
	require.Equal(t, "skipped", byRun[ids[1]].Outcome)
	require.Contains(t, byRun[ids[1]].Detail, "unchanged")
	for _, id := range ids[1:] {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, catalog.RunPaused, r.Status, "run %s", id)
	}

	op, byRun = runOperation(ctx, t, s, catalog.ActionResume, catalog.RunListParams{Workflow: "bulk"})
	require.Equal(t, 4, op.Applied, "every paused run resumed: %v", byRun)
	for _, id := range ids[1:] {
		r, err := s.RunGet(ctx, id)
		require.NoError(t, err)
		require.Equal(t, catalog.RunPending, r.Status, "run %s", id)
	}
	require.Equal(t, 4, len(countEvents(ctx, t, s, catalog.EventRunResumed)))

	op, byRun = runOperation(ctx, t, s, catalog.ActionRetry, catalog.RunListParams{Workflow: "bulk"})
	require.Equal(t, 1, op.Applied, "only the canceled run can be retried: %v", byRun)
	require.Equal(t, "applied", byRun[ids[0]].Outcome)
	require.Contains(t, byRun[ids[2]].Detail, "only a failed or canceled run")
	retried := countEvents(ctx, t, s, catalog.EventRunRetried)
	require.Equal(t, map[uuid.UUID]int{ids[0]: 1}, retried)
}
