package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
)

const (
	// DefaultSpanInterval is SpanExporterConfig.Interval's default, the
	// dispatcher's default poll interval (runtime.DefaultPollInterval).
	DefaultSpanInterval = time.Second
	// spanBatch is how many queued span ends the exporter takes at a time.
	spanBatch = 100
	// spanEndTimeout bounds the catalog read behind one end's spans.
	spanEndTimeout = 5 * time.Second
)

// SpanExporterConfig tunes a SpanExporter. A nil *SpanExporterConfig means
// defaults.
type SpanExporterConfig struct {
	// Tracer records the spans; default nil: the exporter only drains the queue.
	Tracer *tracing.Tracer
	// Interval is how often the queue is drained; default DefaultSpanInterval (1s).
	Interval time.Duration
	// Logger; default discard.
	Logger *slog.Logger
}

// SpanExporter records the spans no attempt records (catalog.Store.SpanEndsTake): a
// suspended step's, when the wait ends (a wake, a signal, an approval, a callback, a
// child run's or a map's end) and its run's when that ended the run; a canceled
// run's, with the cancel status. Whichever server takes an end records it, once
// (tracing.Tracer.EmitStepEnd). Every server runs one, with a tracer or not: without
// one it only drains the queue.
//
// Create it with NewSpanExporter; run it with Start and Stop. It is safe for
// concurrent use.
type SpanExporter struct {
	loop
	store  *catalog.Store
	cfg    SpanExporterConfig
	logger *slog.Logger
}

// NewSpanExporter returns an exporter of store's queued span ends.
func NewSpanExporter(store *catalog.Store, cfg *SpanExporterConfig) *SpanExporter {
	var c SpanExporterConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval <= 0 {
		c.Interval = DefaultSpanInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &SpanExporter{loop: loop{name: "span exporter"}, store: store, cfg: c,
		logger: c.Logger.With("component", "spans")}
}

// Start drains the queue every Interval until Stop.
func (e *SpanExporter) Start(ctx context.Context) error {
	return e.start(ctx, e.run)
}

// Stop ends the draining and waits for it, or for ctx. Ends taken but not recorded
// when it cancels them are lost: spans are best effort.
func (e *SpanExporter) Stop(ctx context.Context) error { return e.stop(ctx) }

func (e *SpanExporter) run(ctx context.Context) {
	t := time.NewTicker(e.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			ends, err := e.store.SpanEndsTake(ctx, spanBatch)
			if err != nil {
				if ctx.Err() == nil {
					e.logger.Warn("take span ends", "error", err)
				}
				break
			}
			if e.cfg.Tracer != nil {
				for _, end := range ends {
					e.emit(ctx, end)
				}
			}
			if len(ends) < spanBatch {
				break
			}
		}
	}
}

func (e *SpanExporter) emit(ctx context.Context, end catalog.SpanEnd) {
	ctx, cancel := context.WithTimeout(ctx, spanEndTimeout)
	defer cancel()
	if end.StepKey == nil {
		r, err := e.store.RunTraceEndGet(ctx, end.RunID)
		if err != nil {
			e.logger.Warn("read the run's end for its span", "run_id", end.RunID, "error", err)
			return
		}
		e.cfg.Tracer.EmitRunEnd(ctx, end.RunID, r)
		return
	}
	s, err := e.store.StepTraceEndGet(ctx, end.RunID, *end.StepKey)
	if err != nil {
		e.logger.Warn("read the step's end for its span", "run_id", end.RunID, "step", *end.StepKey, "error", err)
		return
	}
	e.cfg.Tracer.EmitStepEnd(ctx, end.RunID, *end.StepKey, s)
}
