package catalog_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// saga is reserve → charge → ship, each with a compensation: the shape of
// examples/saga.
var saga = []catalog.NewStep{
	{Key: "reserve", MaxAttempts: 1, CompensateAttempts: 1},
	{Key: "charge", Needs: []string{"reserve"}, MaxAttempts: 1, CompensateAttempts: 1},
	{Key: "ship", Needs: []string{"charge"}, MaxAttempts: 1, CompensateAttempts: 1},
}

// sagaFails runs reserve and charge of the saga run id (created already), fails
// ship and runs its compensations: charge's, then reserve's (each asserted to be
// the one ready), and returns with the run failed.
func sagaFails(t *testing.T, ctx context.Context, s *catalog.Store, id uuid.UUID, reused bool) {
	t.Helper()
	if !reused {
		succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["reserve"])
		succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["charge"])
	}
	fail(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["ship"])
	e := lastEvent(t, ctx, s, id)
	require.Equal(t, catalog.EventRunCompensating, e.Type)
	require.JSONEq(t, `{"step": "ship", "steps": ["compensate-charge", "compensate-reserve"]}`, string(e.Data),
		"compensations in reverse completion order")
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["compensate-charge"])
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["compensate-reserve"])
	require.Equal(t, catalog.RunFailed, runOf(t, ctx, s, id).Status)
}

// TestRerunCompensatesInCompletionOrder: a rerun from ship reuses reserve and
// charge; when ship fails again, charge is compensated before reserve, as in the
// source run (reverse completion order), because the reused steps keep the times
// they finished at in the source. They were given the rerun's time, both the same,
// and the tie was broken by key: compensate-reserve ran first.
func TestRerunCompensatesInCompletionOrder(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	src := runWith(t, ctx, s, saga, nil)
	sagaFails(t, ctx, s, src.ID, false)

	rerun, plan, _, err := s.RunRerun(ctx, &catalog.RunRerunParams{Source: src.ID, FromStep: "ship", Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, []string{"reserve", "charge"}, plan.Reused)
	for _, key := range plan.Reused {
		was, err := s.StepGet(ctx, src.ID, key)
		require.NoError(t, err)
		is, err := s.StepGet(ctx, rerun.ID, key)
		require.NoError(t, err)
		require.Equal(t, was.FinishedAt, is.FinishedAt, "%s keeps the time it finished at in the source", key)
	}
	sagaFails(t, ctx, s, rerun.ID, true)
}

// TestRetryKeepsStepHistory: a retried run keeps the steps of its earlier tries
// that the retry replaced (its failed step, its compensations), each with its try,
// in StepHistory; a second retry adds the second try's.
func TestRetryKeepsStepHistory(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	r := runWith(t, ctx, s, saga, nil)
	sagaFails(t, ctx, s, r.ID, false)
	hist, err := s.StepHistory(ctx, r.ID)
	require.NoError(t, err)
	require.Empty(t, hist, "no retry yet")

	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Actor: "test"})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"reserve": "succeeded", "charge": "succeeded", "ship": "ready"}, statuses(t, ctx, s, r.ID))
	_, data := lastEventData(t, ctx, s, r.ID)
	require.EqualValues(t, 2, data["try"], "the run.retried event names the new try")

	type tried struct {
		Try         int
		Key, Status string
		Phase       catalog.Phase
		Attempts    int
	}
	got := func() []tried {
		hist, err := s.StepHistory(ctx, r.ID)
		require.NoError(t, err)
		out := make([]tried, len(hist))
		for i, h := range hist {
			require.NotNil(t, h.FinishedAt, h.Key)
			out[i] = tried{h.Try, h.Key, string(h.Status), h.Phase, h.Attempts}
		}
		return out
	}
	first := []tried{
		{1, "ship", "failed", catalog.PhaseMain, 1},
		{1, "compensate-charge", "succeeded", catalog.PhaseCompensate, 1},
		{1, "compensate-reserve", "succeeded", catalog.PhaseCompensate, 1},
	}
	require.Equal(t, first, got())

	// The second try fails again, and is retried: its steps join the history.
	sagaFails(t, ctx, s, r.ID, true)
	_, _, err = s.RunRetry(ctx, &catalog.RunRetryParams{RunID: r.ID, Actor: "test"})
	require.NoError(t, err)
	second := []tried{
		{2, "ship", "failed", catalog.PhaseMain, 2},
		{2, "compensate-charge", "succeeded", catalog.PhaseCompensate, 1},
		{2, "compensate-reserve", "succeeded", catalog.PhaseCompensate, 1},
	}
	require.Equal(t, append(first, second...), got())
	succeed(t, ctx, s, claimKeys(t, ctx, s, "d1", 1)["ship"])
	require.Equal(t, catalog.RunSucceeded, runOf(t, ctx, s, r.ID).Status)
}
