package maintenance

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// Defaults of the reaper (ReaperConfig.Interval, ReaperConfig.Batch).
const (
	DefaultReapInterval = time.Minute
	DefaultReapBatch    = 100
)

// ArchiveBlobs is what the reaper needs of the blob store: it writes the archives
// of the runs it deletes (blobstore.Store has it).
type ArchiveBlobs interface {
	Put(ctx context.Context, kind string, r io.Reader, opts blobstore.PutOptions) (blobstore.Object, error)
}

// ReaperConfig tunes a Reaper. A nil *ReaperConfig means defaults.
type ReaperConfig struct {
	// Retention is the server's retention of finished runs, for the versions that
	// set none (cairn serve --retention); default: runs are kept forever.
	Retention catalog.RetentionDefaults
	// AuditRetention is how long audit log records are kept (cairn serve
	// --audit-retention); default 0: forever.
	AuditRetention time.Duration
	// Interval is how often the reaper looks for runs past their retention and
	// expired idempotency keys; default DefaultReapInterval (1m).
	Interval time.Duration
	// Batch is how many runs one reaper transaction deletes at most; default
	// DefaultReapBatch (100).
	Batch int
	// OnDBError is called when a database call of the reaper fails; cairn serve
	// passes its dispatcher's runtime.Dispatcher.NoteDBError (its sweeper waits
	// after an outage). Default none.
	OnDBError func()
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the reaper's metrics; default none.
	Registerer prometheus.Registerer
}

// Reaper deletes the finished runs past their retention, the expired
// idempotency keys and received events, and the audit records past
// AuditRetention, on every server: a pass every Interval (jittered) takes batches
// of Batch runs, each deleted in its own short transaction that skips the runs
// another holds (catalog.Store.RunsDelete), until a batch comes back short. The runs
// to archive are written to the blob store first; one whose archive cannot be
// written is kept for a later pass.
//
// Create it with NewReaper; run it with Start and Stop, or a pass with Reap. It is
// safe for concurrent use.
type Reaper struct {
	loop
	store   *catalog.Store
	blobs   ArchiveBlobs
	cfg     ReaperConfig
	logger  *slog.Logger
	metrics reaperMetrics
}

// NewReaper returns a reaper of store's runs that writes archives to blobs.
func NewReaper(store *catalog.Store, blobs ArchiveBlobs, cfg *ReaperConfig) *Reaper {
	var c ReaperConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval <= 0 {
		c.Interval = DefaultReapInterval
	}
	if c.Batch <= 0 {
		c.Batch = DefaultReapBatch
	}
	if c.OnDBError == nil {
		c.OnDBError = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reaper{loop: loop{name: "reaper"}, store: store, blobs: blobs, cfg: c,
		logger: c.Logger.With("component", "reaper"), metrics: newReaperMetrics(c.Registerer)}
}

// Start runs a pass every Interval until Stop.
func (r *Reaper) Start(ctx context.Context) error {
	return r.start(ctx, func(ctx context.Context) {
		for idle(ctx, r.cfg.Interval) {
			r.Reap(ctx)
		}
	})
}

// Stop ends the passes (one under way is canceled: its transactions roll back)
// and waits for them, or for ctx.
func (r *Reaper) Stop(ctx context.Context) error { return r.stop(ctx) }

// Reap runs one pass of the reaper now: it deletes the runs past their retention
// (archiving those configured so) and the expired idempotency keys, and returns how
// many runs it deleted. Tests and tools may call it on a reaper not started.
func (r *Reaper) Reap(ctx context.Context) int {
	n := r.reapRuns(ctx)
	r.expireKeys(ctx)
	r.expireEvents(ctx)
	if r.cfg.AuditRetention > 0 {
		r.expireBatches(ctx, "audit records", func(ctx context.Context, limit int) (int, error) {
			return r.store.AuditExpire(ctx, r.cfg.AuditRetention, limit)
		}, r.metrics.auditExpired)
	}
	return n
}

// reapRuns is one pass over the expired runs; it returns how many it deleted.
func (r *Reaper) reapRuns(ctx context.Context) int {
	total := 0
	for ctx.Err() == nil {
		expired, err := r.store.RunsExpired(ctx, r.cfg.Retention, r.cfg.Batch)
		if err != nil {
			r.cfg.OnDBError()
			if ctx.Err() == nil {
				r.logger.Warn("list expired runs failed", "error", err)
			}
			return total
		}
		if len(expired) == 0 {
			return total
		}
		ids := make([]uuid.UUID, 0, len(expired))
		archives := map[uuid.UUID]string{}
		for _, e := range expired {
			if e.Archive {
				key, err := r.archiveRun(ctx, e.ID)
				if err != nil {
					if ctx.Err() == nil {
						r.logger.Warn("archive run failed; it is kept for a later pass", "run_id", e.ID, "error", err)
					}
					continue
				}
				archives[e.ID] = key
			}
			ids = append(ids, e.ID)
		}
		deleted, err := r.store.RunsDelete(ctx, r.cfg.Retention, ids, archives)
		if err != nil {
			r.cfg.OnDBError()
			if ctx.Err() == nil {
				r.logger.Warn("delete expired runs failed", "error", err)
			}
			return total
		}
		archived := 0
		for _, id := range deleted {
			if _, ok := archives[id]; ok {
				archived++
			}
		}
		r.metrics.runsReaped.Add(float64(len(deleted)))
		r.metrics.runsArchived.Add(float64(archived))
		total += len(deleted)
		if len(deleted) > 0 {
			r.logger.Debug("deleted runs past their retention", "count", len(deleted), "archived", archived)
		}
		// A short batch, or one whose runs others hold or could not be
		// archived: the next pass takes the rest.
		if len(expired) < r.cfg.Batch || len(deleted) == 0 {
			return total
		}
	}
	return total
}

// archiveRun writes run id's archive (catalog.Archive as JSON Lines) to the blob
// store and returns its key.
func (r *Reaper) archiveRun(ctx context.Context, id uuid.UUID) (string, error) {
	a, err := r.store.RunArchive(ctx, id)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if _, err := a.WriteTo(&buf); err != nil {
		return "", err
	}
	obj, err := r.blobs.Put(ctx, blobstore.KindArchives, &buf, blobstore.PutOptions{
		ContentType: "application/x-ndjson", Size: int64(buf.Len())})
	if err != nil {
		return "", err
	}
	return obj.Key, nil
}

// expireKeys deletes the expired idempotency keys, in batches.
func (r *Reaper) expireKeys(ctx context.Context) {
	r.expireBatches(ctx, "idempotency keys", r.store.IdempotencyKeysExpire, r.metrics.keysExpired)
}

// expireEvents deletes the received events past their retention, in batches
// (docs/events.md, "Retention").
func (r *Reaper) expireEvents(ctx context.Context) {
	r.expireBatches(ctx, "received events", r.store.ReceivedEventsExpire, r.metrics.eventsExpired)
}

// expireBatches calls expire with batches of Batch*10 rows until one is not full,
// counting the rows in counted.
func (r *Reaper) expireBatches(ctx context.Context, what string, expire func(context.Context, int) (int, error),
	counted prometheus.Counter) {
	for ctx.Err() == nil {
		n, err := expire(ctx, r.cfg.Batch*10)
		if err != nil {
			r.cfg.OnDBError()
			if ctx.Err() == nil {
				r.logger.Warn("expire "+what+" failed", "error", err)
			}
			return
		}
		counted.Add(float64(n))
		if n < r.cfg.Batch*10 {
			return
		}
	}
}

// reaperMetrics count what the reaper deleted.
type reaperMetrics struct {
	runsReaped, runsArchived, keysExpired, eventsExpired, auditExpired prometheus.Counter
}

func newReaperMetrics(reg prometheus.Registerer) reaperMetrics {
	m := reaperMetrics{
		runsReaped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_runs_reaped_total", Help: "Finished runs deleted by this dispatcher's reaper, past their retention.",
		}),
		runsArchived: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_runs_archived_total", Help: "Runs archived to the blob store by this dispatcher's reaper before their deletion.",
		}),
		keysExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_idempotency_keys_expired_total", Help: "Expired idempotency keys deleted by this dispatcher's reaper.",
		}),
		eventsExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_received_events_expired_total", Help: "Received events (POST /v1/events) deleted by this dispatcher's reaper, past their retention.",
		}),
		auditExpired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_audit_records_expired_total", Help: "Audit log records deleted by this dispatcher's reaper, past CAIRN_AUDIT_RETENTION.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.runsReaped, m.runsArchived, m.keysExpired, m.eventsExpired, m.auditExpired)
	}
	return m
}
