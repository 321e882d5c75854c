package runtime

import (
	"context"
	"encoding/json"
	"sync"
	"time"
)

// Bounds of the step.progress events of one attempt (docs/functions.md): a
// handler may report progress as often as it likes, the catalog records a few.
const (
	// progressBurst is how many reports are recorded as they come, before the
	// rate applies (and again after a quiet spell: one more per interval).
	progressBurst = 10
	// progressInterval: past the burst, at most one report per interval is
	// recorded. The reports in between are coalesced: the newest waits, and is
	// recorded when the interval is up (or when the attempt ends).
	progressInterval = time.Second
	// maxProgressEvents bounds the events of one attempt. Once it is nearly
	// reached, only the newest report is kept, and recorded when the attempt
	// ends: the last event always holds the last report.
	maxProgressEvents = 1000
	// maxProgressBytes bounds the bytes of those events, likewise (each report
	// is at most a control line, 1 MiB, so the final one may go past it).
	maxProgressBytes = 8 << 20
)

// progressLimiter records an attempt's progress reports within the bounds above.
// Its methods are safe for concurrent use; records are made one at a time and in
// order.
type progressLimiter struct {
	// record writes one event's data; onError hears of a deferred record's
	// failure (a direct one is returned to report's caller).
	record  func(ctx context.Context, data json.RawMessage) error
	onError func(error)
	// ctx is the attempt's: deferred records stop with it. now is the clock.
	ctx context.Context
	now func() time.Time

	mu      sync.Mutex
	tokens  float64
	last    time.Time // when tokens was last refilled
	events  int       // recorded so far
	bytes   int
	pending json.RawMessage // the newest report not recorded yet
	timer   *time.Timer     // records pending when a token is due
	ended   bool
}

func newProgressLimiter(ctx context.Context, record func(context.Context, json.RawMessage) error, onError func(error)) *progressLimiter {
	return &progressLimiter{record: record, onError: onError, ctx: ctx, now: time.Now, tokens: progressBurst}
}

// refill adds the tokens earned since the last refill. Called with mu held.
func (p *progressLimiter) refill() {
	now := p.now()
	if !p.last.IsZero() {
		p.tokens = min(progressBurst, p.tokens+float64(now.Sub(p.last))/float64(progressInterval))
	}
	p.last = now
}

// roomFor says whether a report of n bytes may be recorded before the attempt
// ends: one event is kept for the last report. Called with mu held.
func (p *progressLimiter) roomFor(n int) bool {
	return p.events < maxProgressEvents-1 && p.bytes+n <= maxProgressBytes
}

// report records data (a step.progress event's) now, when the rate and the
// bounds allow, or keeps it as the newest report waiting. It returns the error of
// a record made now.
func (p *progressLimiter) report(ctx context.Context, data json.RawMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	p.refill()
	if p.tokens >= 1 && p.roomFor(len(data)) {
		p.pending = nil
		return p.recordLocked(ctx, data)
	}
	p.pending = data
	if p.timer == nil && p.roomFor(len(data)) {
		p.timer = time.AfterFunc(p.untilToken(), p.flush)
	}
	return nil
}

// untilToken is how long until the next token. Called with mu held.
func (p *progressLimiter) untilToken() time.Duration {
	return time.Duration((1 - p.tokens) * float64(progressInterval))
}

// recordLocked records data, spending a token. Called with mu held, so that
// records are made in order.
func (p *progressLimiter) recordLocked(ctx context.Context, data json.RawMessage) error {
	p.tokens--
	p.events++
	p.bytes += len(data)
	return p.record(ctx, data)
}

// flush records the report waiting, once a token is due (the timer's function).
func (p *progressLimiter) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.timer = nil
	if p.ended || p.pending == nil || p.ctx.Err() != nil {
		return
	}
	p.refill()
	switch {
	case !p.roomFor(len(p.pending)):
		return // kept for the end
	case p.tokens < 1:
		p.timer = time.AfterFunc(p.untilToken(), p.flush)
		return
	}
	data := p.pending
	p.pending = nil
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	if err := p.recordLocked(ctx, data); err != nil && p.ctx.Err() == nil {
		p.onError(err)
	}
}

// end stops deferred records and records the report still waiting, if the
// attempt's context still runs (not for an attempt whose lease is lost, whose run
// is canceled or that is handed back). Reports that come after it are dropped.
// It returns the record's error.
func (p *progressLimiter) end() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return nil
	}
	p.ended = true
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	data := p.pending
	p.pending = nil
	if data == nil || p.ctx.Err() != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(p.ctx, 10*time.Second)
	defer cancel()
	p.events++
	p.bytes += len(data)
	return p.record(ctx, data)
}
