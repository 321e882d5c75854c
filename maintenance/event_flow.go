package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/catalog"
)

const (
	// DefaultEventFlowInterval is EventFlowFirerConfig.Interval's default: how
	// long a queued singleton start may wait after its key's run has ended, at
	// most (a due window is fired at its due time).
	DefaultEventFlowInterval = time.Second
	// eventFlowBatch is how many windows (and queued starts) one pass takes.
	eventFlowBatch = 50
	// singletonForgetEvery is how often the firer deletes the rows of singleton
	// keys whose run has ended, singletonForgetBatch at a time.
	singletonForgetEvery = time.Minute
	singletonForgetBatch = 1000
)

// EventFlowFirerConfig tunes an EventFlowFirer. A nil *EventFlowFirerConfig means
// defaults.
type EventFlowFirerConfig struct {
	// Interval is the longest wait between two passes; default
	// DefaultEventFlowInterval (1s).
	Interval time.Duration
	// OnDBError is called when a pass fails; cairn serve passes its dispatcher's
	// runtime.Dispatcher.NoteDBError. Default none.
	OnDBError func()
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the firer's metrics; default none.
	Registerer prometheus.Registerer
}

// EventFlowFirer starts the runs that event triggers' flow control held back
// (docs/events.md): debounce and batch windows at their due time, and queued
// singleton starts once their key's run has ended. A pass
// (catalog.Store.EventFlowFire) takes its rows FOR UPDATE SKIP LOCKED, so several
// servers never start one twice, and the state is rows only: a server killed
// mid-window leaves it to the next pass of any server. It runs a pass every
// Interval, or sooner when a window is due sooner, and at once again when a pass
// took a full batch.
//
// Create it with NewEventFlowFirer; run it with Start and Stop. It is safe for
// concurrent use.
type EventFlowFirer struct {
	loop
	store  *catalog.Store
	cfg    EventFlowFirerConfig
	logger *slog.Logger
	// runs counts the runs started, by kind (debounce, batch, queue).
	runs *prometheus.CounterVec
}

// NewEventFlowFirer returns a firer of store's held event starts.
func NewEventFlowFirer(store *catalog.Store, cfg *EventFlowFirerConfig) *EventFlowFirer {
	var c EventFlowFirerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval <= 0 {
		c.Interval = DefaultEventFlowInterval
	}
	if c.OnDBError == nil {
		c.OnDBError = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	f := &EventFlowFirer{loop: loop{name: "event flow firer"}, store: store, cfg: c,
		logger: c.Logger.With("component", "event_flow"),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_event_flow_runs_total",
			Help: "Runs this server's event flow firer started: a debounce or batch window that came due, or a queued singleton start whose key's run ended.",
		}, []string{"kind"}),
	}
	for _, k := range []string{catalog.FlowDebounce, catalog.FlowBatch, catalog.FlowQueue} {
		f.runs.WithLabelValues(k)
	}
	if c.Registerer != nil {
		c.Registerer.MustRegister(f.runs)
	}
	return f
}

// Start runs the passes until Stop.
func (f *EventFlowFirer) Start(ctx context.Context) error { return f.start(ctx, f.run) }

// Stop ends the passes (one under way is canceled: it commits nothing, and the
// next pass of any server redoes it) and waits for them, or for ctx.
func (f *EventFlowFirer) Stop(ctx context.Context) error { return f.stop(ctx) }

func (f *EventFlowFirer) run(ctx context.Context) {
	forgotten := time.Now()
	dueLoop(ctx, f.cfg.Interval, func(ctx context.Context) (bool, *time.Time) {
		if time.Since(forgotten) >= singletonForgetEvery {
			forgotten = time.Now()
			if _, err := f.store.EventSingletonsForget(ctx, singletonForgetBatch); err != nil {
				f.cfg.OnDBError()
				if ctx.Err() == nil {
					f.logger.Warn("forget ended singleton keys failed", "error", err)
				}
			}
		}
		res, err := f.store.EventFlowFire(ctx, &catalog.EventFlowFireParams{Limit: eventFlowBatch})
		if err != nil {
			f.cfg.OnDBError()
			if ctx.Err() == nil {
				f.logger.Warn("fire event flow failed", "error", err)
			}
			return false, nil
		}
		for _, ferr := range res.Failed {
			f.logger.Warn("a held event start could not start its run", "error", ferr)
		}
		for kind, n := range res.Started {
			f.runs.WithLabelValues(kind).Add(float64(n))
		}
		return res.Taken >= eventFlowBatch, res.NextDue
	})
}
