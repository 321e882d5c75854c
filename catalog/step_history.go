package catalog

import (
	"context"
	"fmt"

	"github.com/google/uuid"
)

// sqlStepHistory lists the steps of a run's earlier tries (table step_history,
// migrations/00042_run_lock_order.sql), each read back as the steps row it was
// copied from, by try, then as StepList orders a try's steps.
const sqlStepHistory = `
SELECT try, ` + stepColumns + ` FROM (
    SELECT h.try, x.* FROM step_history h CROSS JOIN LATERAL jsonb_populate_record(NULL::steps, h.step) x
    WHERE h.run_id = $1
) y
ORDER BY try, created_at, key`

// TriedStep is a step of an earlier try of a run: as it was when a retry
// (RunRetry) replaced it.
type TriedStep struct {
	// Try is the try it belonged to: 1 for the run's first, 2 after one retry, …
	Try int `db:"try"`
	Step
}

// StepHistory returns the steps that retries of a run replaced, each as it was
// then, with its try, in order of try (then as StepList): the failed, canceled
// and skipped steps the retry ran again, and the failure handlers (compensations,
// on_failure steps) the failure had laid out. A step a retry kept (it succeeded)
// is in StepList only; a map's instances are in neither (MapItemList). Empty for a
// run never retried, or no such run.
func (s *Store) StepHistory(ctx context.Context, runID uuid.UUID) ([]TriedStep, error) {
	var out []TriedStep
	if err := s.db.SelectContext(ctx, &out, sqlStepHistory, runID); err != nil {
		return nil, fmt.Errorf("list step history of run %s: %w", runID, translateError(err))
	}
	return out, nil
}
