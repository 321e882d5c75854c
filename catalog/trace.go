package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// sqlStepTraceEnd reads what the spans of a step that just ended need: the step's
// times and status, and the run's when this step's transaction ended the run (the
// run's finished_at is that transaction's now(), as is the step's). When one
// transaction ended several steps of the run (a group commit), the greatest key
// among them reports the run, so that it is reported once.
const sqlStepTraceEnd = `
SELECT s.status, coalesce(s.started_at, s.created_at) AS started_at, s.finished_at,
       r.workflow, r.version, r.status AS run_status, r.created_at AS run_created_at,
       (r.finished_at IS NOT NULL AND r.finished_at = s.finished_at AND NOT EXISTS (
            SELECT 1 FROM steps o WHERE o.run_id = r.id AND o.finished_at = r.finished_at
              AND o.key > s.key AND o.status IN ('succeeded', 'failed'))) AS run_ended,
       r.finished_at AS run_finished_at
FROM steps s JOIN runs r ON r.id = s.run_id
WHERE s.run_id = $1 AND s.key = $2`

// StepTraceEnd is a step's end, and its run's when the same write ended it.
type StepTraceEnd struct {
	Status     StepStatus `db:"status"`
	StartedAt  time.Time  `db:"started_at"`
	FinishedAt *time.Time `db:"finished_at"`
	Workflow   string     `db:"workflow"`
	Version    int        `db:"version"`
	RunStatus  RunStatus  `db:"run_status"`
	RunCreated time.Time  `db:"run_created_at"`
	// RunEnded reports that the write that ended the step ended the run too.
	RunEnded    bool       `db:"run_ended"`
	RunFinished *time.Time `db:"run_finished_at"`
}

// StepTraceEndGet reads a step's end for its trace spans (ErrNotFound when the step
// is not there).
func (s *Store) StepTraceEndGet(ctx context.Context, run uuid.UUID, key string) (*StepTraceEnd, error) {
	var e StepTraceEnd
	if err := s.db.GetContext(ctx, &e, sqlStepTraceEnd, run, key); err != nil {
		return nil, fmt.Errorf("step trace end %s/%s: %w", run, key, translateError(err))
	}
	return &e, nil
}

// sqlSpanOutboxTake takes queued span ends, oldest first, skipping those another
// dispatcher is taking.
const sqlSpanOutboxTake = `
DELETE FROM span_outbox WHERE id IN (
    SELECT id FROM span_outbox ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING run_id, step_key`

// sqlRunTraceEnd reads what a run's span needs.
const sqlRunTraceEnd = `
SELECT workflow, version, status, created_at, finished_at FROM runs WHERE id = $1`

// SpanEnd is an end whose span no attempt records (span_outbox): a suspended step
// that ended (StepKey set), or a canceled run (StepKey nil).
type SpanEnd struct {
	RunID   uuid.UUID `db:"run_id"`
	StepKey *string   `db:"step_key"`
}

// SpanEndsTake takes (deletes and returns) up to limit queued span ends.
func (s *Store) SpanEndsTake(ctx context.Context, limit int) ([]SpanEnd, error) {
	var out []SpanEnd
	if err := s.db.SelectContext(ctx, &out, sqlSpanOutboxTake, limit); err != nil {
		return nil, fmt.Errorf("take span ends: %w", translateError(err))
	}
	return out, nil
}

// RunTraceEnd is what a run's span needs.
type RunTraceEnd struct {
	Workflow   string     `db:"workflow"`
	Version    int        `db:"version"`
	Status     RunStatus  `db:"status"`
	CreatedAt  time.Time  `db:"created_at"`
	FinishedAt *time.Time `db:"finished_at"`
}

// RunTraceEndGet reads a run's end for its span (ErrNotFound when the run is gone).
func (s *Store) RunTraceEndGet(ctx context.Context, run uuid.UUID) (*RunTraceEnd, error) {
	var e RunTraceEnd
	if err := s.db.GetContext(ctx, &e, sqlRunTraceEnd, run); err != nil {
		return nil, fmt.Errorf("run trace end %s: %w", run, translateError(err))
	}
	return &e, nil
}
