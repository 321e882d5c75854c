package maintenance

import (
	"context"
	"log/slog"
	mrand "math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

const (
	// DefaultScheduleInterval is ScheduleFirerConfig.Interval's default, the
	// dispatcher's default poll interval (runtime.DefaultPollInterval).
	DefaultScheduleInterval = time.Second
	// scheduleBatch is how many schedules one fire pass takes.
	scheduleBatch = 50
	// scheduleMinWait is the shortest wait between two fire passes, so that a
	// schedule due in a few microseconds does not spin the loop.
	scheduleMinWait = 5 * time.Millisecond
)

// ScheduleFirerConfig tunes a ScheduleFirer. A nil *ScheduleFirerConfig means
// defaults.
type ScheduleFirerConfig struct {
	// Interval is the longest wait between two fire passes; default
	// DefaultScheduleInterval (1s).
	Interval time.Duration
	// OnDBError is called when a fire pass fails; cairn serve passes its
	// dispatcher's runtime.Dispatcher.NoteDBError. Default none.
	OnDBError func()
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the firer's metrics; default none.
	Registerer prometheus.Registerer
}

// ScheduleFirer fires schedules (the manifest's schedules:), on every server: a pass
// (catalog.Store.ScheduleFire) takes the due schedules no other server holds and, in
// one transaction, creates each fire's run and advances its next fire, so every fire
// is created exactly once, without a leader. It runs a pass every Interval, or sooner
// when the earliest next fire comes sooner, and at once again when a pass took a full
// batch.
//
// Create it with NewScheduleFirer; run it with Start and Stop. It is safe for
// concurrent use.
type ScheduleFirer struct {
	loop
	store  *catalog.Store
	cfg    ScheduleFirerConfig
	logger *slog.Logger
	// fires counts the fires handled, by result (created, skipped).
	fires *prometheus.CounterVec
}

// NewScheduleFirer returns a firer of store's schedules.
func NewScheduleFirer(store *catalog.Store, cfg *ScheduleFirerConfig) *ScheduleFirer {
	var c ScheduleFirerConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval <= 0 {
		c.Interval = DefaultScheduleInterval
	}
	if c.OnDBError == nil {
		c.OnDBError = func() {}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	f := &ScheduleFirer{loop: loop{name: "schedule firer"}, store: store, cfg: c,
		logger: c.Logger.With("component", "schedules"),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_schedule_fires_total", Help: "Schedule fires handled by this dispatcher's fire loop, by result: created (a run) or skipped (overlap, or older than the catchup window).",
		}, []string{"result"}),
	}
	if c.Registerer != nil {
		c.Registerer.MustRegister(f.fires)
	}
	return f
}

// Start runs the fire passes until Stop.
func (f *ScheduleFirer) Start(ctx context.Context) error {
	return f.start(ctx, f.run)
}

// Stop ends the passes (one under way is canceled: it commits nothing, and the next
// pass of any server redoes it) and waits for them, or for ctx.
func (f *ScheduleFirer) Stop(ctx context.Context) error { return f.stop(ctx) }

func (f *ScheduleFirer) run(ctx context.Context) {
	dueLoop(ctx, f.cfg.Interval, func(ctx context.Context) (bool, *time.Time) {
		res, err := f.store.ScheduleFire(ctx, &catalog.ScheduleFireParams{Limit: scheduleBatch, Next: cronCache{}.next})
		if err != nil {
			f.cfg.OnDBError()
			if ctx.Err() == nil {
				f.logger.Warn("fire schedules failed", "error", err)
			}
			return false, nil
		}
		for _, ferr := range res.Failed {
			f.logger.Warn("schedule fire failed; it is tried again at the next pass", "error", ferr)
		}
		f.fires.WithLabelValues("created").Add(float64(res.Created))
		f.fires.WithLabelValues("skipped").Add(float64(res.Skipped))
		if res.Created > 0 || res.Skipped > 0 {
			f.logger.Debug("schedules fired", "schedules", res.Schedules, "created", res.Created, "skipped", res.Skipped)
		}
		return res.Schedules >= scheduleBatch, res.NextDue
	})
}

// dueLoop runs pass until ctx ends: every interval (the first after a random
// part of it, so that servers started together spread their passes), at once
// again when pass took a full batch (full), or at next when that is sooner, but
// never sooner than scheduleMinWait after the last pass.
func dueLoop(ctx context.Context, interval time.Duration, pass func(ctx context.Context) (full bool, next *time.Time)) {
	wait := time.Duration(mrand.Float64() * float64(interval))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = interval
		full, next := pass(ctx)
		switch {
		case full:
			wait = 0
		case next != nil:
			wait = max(min(wait, time.Until(*next)), scheduleMinWait)
		}
	}
}

// cronCache parses each (cron, time zone) of one fire pass once.
type cronCache map[[2]string]cron.Schedule

// next is a catalog.NextFireFunc.
func (c cronCache) next(expr, tz string, t time.Time) (time.Time, bool) {
	key := [2]string{expr, tz}
	s, ok := c[key]
	if !ok {
		loc, err := time.LoadLocation(tz)
		if err != nil {
			return time.Time{}, false
		}
		if s, err = bundle.ParseCron(expr, loc); err != nil {
			return time.Time{}, false
		}
		c[key] = s
	}
	return bundle.NextFire(s, t)
}
