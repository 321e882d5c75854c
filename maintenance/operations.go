package maintenance

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
)

const (
	// DefaultOperationLeaseTTL is OperationWorkerConfig.LeaseTTL's default, the
	// dispatcher's default lease TTL (runtime.DefaultLeaseTTL).
	DefaultOperationLeaseTTL = 30 * time.Second
	// operationBatch is how many runs one transaction of a bulk operation acts on:
	// small enough that a batch holds its runs' locks briefly, large enough that the
	// per-batch cost (the page query, the commit) is spread.
	operationBatch = 100
	// operationPollInterval is how often an idle worker looks for a bulk operation
	// to work on.
	operationPollInterval = time.Second
)

// OperationWorkerConfig tunes an OperationWorker. A nil *OperationWorkerConfig means
// defaults.
type OperationWorkerConfig struct {
	// Owner names this worker in the operations' leases (cairn serve: its
	// dispatcher's name); default host-pid-random.
	Owner string
	// LeaseTTL is how long a worker holds an operation without working a batch of
	// it (each batch extends it); another takes it up once it expires. Default
	// DefaultOperationLeaseTTL (30s).
	LeaseTTL time.Duration
	// OnDBError is called when a database call of the worker fails; cairn serve
	// passes its dispatcher's runtime.Dispatcher.NoteDBError. Default none.
	OnDBError func()
	// Logger; default discard.
	Logger *slog.Logger
}

// OperationWorker works bulk operations (POST /v1/runs:bulk): it takes the oldest
// one nobody holds, applies it batch by batch under a lease of LeaseTTL (each batch
// extends it), and looks for the next. A worker that dies mid-operation leaves it
// to another once its lease expires; each batch commits its runs' actions with the
// cursor, so no run is acted on twice.
//
// Create it with NewOperationWorker; run it with Start and Stop. It is safe for
// concurrent use.
type OperationWorker struct {
	loop
	store  *catalog.Store
	cfg    OperationWorkerConfig
	logger *slog.Logger
}

// NewOperationWorker returns a worker of store's bulk operations.
func NewOperationWorker(store *catalog.Store, cfg *OperationWorkerConfig) *OperationWorker {
	var c OperationWorkerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Owner == "" {
		c.Owner = newOwner()
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = DefaultOperationLeaseTTL
	}
	if c.OnDBError == nil {
		c.OnDBError = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &OperationWorker{loop: loop{name: "operation worker"}, store: store, cfg: c,
		logger: c.Logger.With("component", "operations")}
}

// Start works operations until Stop.
func (w *OperationWorker) Start(ctx context.Context) error {
	return w.start(ctx, func(ctx context.Context) {
		for idle(ctx, operationPollInterval) {
			op, err := w.store.OperationClaim(ctx, w.cfg.Owner, w.cfg.LeaseTTL)
			if err != nil {
				w.cfg.OnDBError()
				if ctx.Err() == nil {
					w.logger.Warn("claim bulk operation failed", "error", err)
				}
				continue
			}
			if op != nil {
				w.work(ctx, op)
			}
		}
	})
}

// Stop ends the work (a batch under way is canceled and rolls back; the operation
// is taken up again, by any server, once its lease expires) and waits for it, or
// for ctx.
func (w *OperationWorker) Stop(ctx context.Context) error { return w.stop(ctx) }

// work applies op batch by batch until it ends, the lease is lost, the worker stops
// or the database fails (the lease then expires and any worker takes it up again).
func (w *OperationWorker) work(ctx context.Context, op *catalog.Operation) {
	logger := w.logger.With("operation", op.ID.String(), "action", string(op.Action))
	logger.Info("bulk operation taken", "processed", op.Processed, "total", op.Total)
	for op.Status == catalog.OperationRunning {
		if ctx.Err() != nil {
			return
		}
		next, err := w.store.OperationStep(ctx, op.ID, w.cfg.Owner, operationBatch, w.cfg.LeaseTTL)
		if errors.Is(err, catalog.ErrLeaseLost) {
			logger.Info("bulk operation lease lost")
			return
		}
		if err != nil {
			w.cfg.OnDBError()
			if ctx.Err() == nil {
				logger.Warn("bulk operation batch failed", "error", err)
			}
			return
		}
		op = next
	}
	logger.Info("bulk operation done", "status", string(op.Status), "applied", op.Applied, "skipped", op.Skipped)
}
