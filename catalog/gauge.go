package catalog

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// sqlStepGauges counts the steps of every run by the states a dashboard watches, one
// partial index each (steps_claim_idx, steps_lease_expiry_idx, steps_suspended_idx),
// in one round trip: its cost follows the live steps, not the history.
const sqlStepGauges = `
SELECT (SELECT count(*) FROM steps WHERE status = 'ready' AND NOT held AND ready_at <= now()) AS ready,
       (SELECT extract(epoch FROM now() - min(ready_at))::float8 FROM steps
         WHERE status = 'ready' AND NOT held AND ready_at <= now()) AS oldest_ready,
       (SELECT count(*) FROM steps WHERE status = 'running') AS running,
       (SELECT count(*) FROM steps WHERE status = 'suspended') AS suspended`

// StepGauges is a snapshot of the catalog's queue, over all runs.
type StepGauges struct {
	// Ready counts the steps ready to be claimed now (ready_at reached, not held).
	Ready int64
	// OldestReady is how long the oldest of them has been ready (0 with none).
	OldestReady time.Duration
	// Running counts the steps leased to a dispatcher.
	Running int64
	// Suspended counts the steps in a durable wait (sleep, signal, approval, callback).
	Suspended int64
}

// StepGaugesGet reads the queue's gauges in one statement.
func (s *Store) StepGaugesGet(ctx context.Context) (StepGauges, error) {
	var g StepGauges
	var oldest sql.NullFloat64
	if err := s.db.QueryRowContext(ctx, sqlStepGauges).Scan(&g.Ready, &oldest, &g.Running, &g.Suspended); err != nil {
		return StepGauges{}, fmt.Errorf("step gauges: %w", translateError(err))
	}
	if oldest.Valid {
		g.OldestReady = time.Duration(oldest.Float64 * float64(time.Second))
	}
	return g, nil
}
