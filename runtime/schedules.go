package runtime

import (
	"context"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
)

const (
	// scheduleBatch is how many schedules one fire pass takes.
	scheduleBatch = 50
	// scheduleMinWait is the shortest wait between two fire passes, so that a
	// schedule due in a few microseconds does not spin the loop.
	scheduleMinWait = 5 * time.Millisecond
)

// scheduleLoop fires schedules (the manifest's schedules:), in every dispatcher: a
// pass (catalog.ScheduleFire) takes the due schedules no other dispatcher holds and,
// in one transaction, creates each fire's run and advances its next fire, so every
// fire is created exactly once, without a leader. It runs a pass every PollInterval,
// or sooner when the earliest next fire comes sooner, and at once again when a pass
// took a full batch.
func (d *Dispatcher) scheduleLoop(ctx context.Context) {
	wait := time.Duration(jitterRand() * float64(d.cfg.PollInterval))
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.noClaim:
			return
		case <-time.After(wait):
		}
		wait = d.cfg.PollInterval
		res, err := d.store.ScheduleFire(ctx, &catalog.ScheduleFireParams{Limit: scheduleBatch, Next: cronCache{}.next})
		if err != nil {
			d.noteDBError()
			if ctx.Err() == nil {
				d.logger.Warn("fire schedules failed", "error", err)
			}
			continue
		}
		for _, ferr := range res.Failed {
			d.logger.Warn("schedule fire failed; it is tried again at the next pass", "error", ferr)
		}
		d.metrics.scheduleFires.WithLabelValues("created").Add(float64(res.Created))
		d.metrics.scheduleFires.WithLabelValues("skipped").Add(float64(res.Skipped))
		if res.Created > 0 || res.Skipped > 0 {
			d.logger.Debug("schedules fired", "schedules", res.Schedules, "created", res.Created, "skipped", res.Skipped)
		}
		switch {
		case res.Schedules >= scheduleBatch:
			wait = 0
		case res.NextDue != nil:
			wait = max(min(wait, time.Until(*res.NextDue)), scheduleMinWait)
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
