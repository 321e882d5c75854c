package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/cairnrun/cairn/catalog"
)

const (
	// operationBatch is how many runs one transaction of a bulk operation acts on:
	// small enough that a batch holds its runs' locks briefly, large enough that the
	// per-batch cost (the page query, the commit) is spread.
	operationBatch = 100
	// operationPollInterval is how often an idle dispatcher looks for a bulk
	// operation to work on.
	operationPollInterval = time.Second
)

// operationLoop works bulk operations (POST /v1/runs:bulk): it takes the oldest one
// nobody holds, applies it batch by batch under a lease of LeaseTTL (each batch
// extends it), and looks for the next. A dispatcher that dies mid-operation leaves
// it to another once its lease expires; each batch commits its runs' actions with
// the cursor, so no run is acted on twice.
func (d *Dispatcher) operationLoop(ctx context.Context) {
	for d.idle(ctx, operationPollInterval) {
		op, err := d.store.OperationClaim(ctx, d.cfg.ID, d.cfg.LeaseTTL)
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("claim bulk operation failed", "error", err)
			}
			continue
		}
		if op != nil {
			d.workOperation(ctx, op)
		}
	}
}

// workOperation applies op batch by batch until it ends, the lease is lost, the
// dispatcher stops or the database fails (the lease then expires and any
// dispatcher takes it up again).
func (d *Dispatcher) workOperation(ctx context.Context, op *catalog.Operation) {
	logger := d.logger.With("operation", op.ID.String(), "action", string(op.Action))
	logger.Info("bulk operation taken", "processed", op.Processed, "total", op.Total)
	for op.Status == catalog.OperationRunning {
		select {
		case <-ctx.Done():
			return
		case <-d.noClaim:
			return
		default:
		}
		next, err := d.store.OperationStep(ctx, op.ID, d.cfg.ID, operationBatch, d.cfg.LeaseTTL)
		if errors.Is(err, catalog.ErrLeaseLost) {
			logger.Info("bulk operation lease lost")
			return
		}
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				logger.Warn("bulk operation batch failed", "error", err)
			}
			return
		}
		op = next
	}
	logger.Info("bulk operation done", "status", string(op.Status), "applied", op.Applied, "skipped", op.Skipped)
}
