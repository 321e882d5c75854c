package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	sse "github.com/tmaxmax/go-sse"
)

// FollowOptions tune FollowRun. The zero value means every default.
type FollowOptions struct {
	// MinBackoff is the wait before reconnecting after the stream dropped; it
	// doubles (±20% jitter) on every connection in a row that brings no new event,
	// up to MaxBackoff, and starts again from MinBackoff after one that does. A
	// Retry-After of the server (a 503 when it has its maximum of streams open, or
	// its database is down) is waited for when it is longer. Default 200ms.
	MinBackoff time.Duration
	// MaxBackoff caps the wait between reconnections. Default 5s.
	MaxBackoff time.Duration
	// MaxFailures is how many connections in a row may fail (refused, broken, or
	// ended by the server) without bringing a new event before FollowRun gives up.
	// Default 10, about half a minute of outage with the default backoff.
	MaxFailures int
	// IdleTimeout drops a connection on which nothing, not even the keep-alive
	// comment a server sends every 15 seconds, arrived for that long (the time
	// FollowRun's fn takes is not counted): a network that silently lost the
	// connection is noticed and the stream reopened. Default 1 minute.
	IdleTimeout time.Duration
	// Logger receives a warning at each reconnection. Default: discard.
	Logger *slog.Logger

	// stopOnRefusal makes FollowRun return (an error for which refused is true) when
	// the server answers the opening of the stream with an error, instead of trying
	// again: WaitRun then polls instead.
	stopOnRefusal bool
}

func (o FollowOptions) withDefaults() FollowOptions {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 200 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 5 * time.Second
	}
	o.MaxBackoff = max(o.MaxBackoff, o.MinBackoff)
	if o.MaxFailures <= 0 {
		o.MaxFailures = 10
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = time.Minute
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// IsFinalEvent reports whether an event of type typ ends a run's history: the
// event of a terminal status, run.<status> (run.succeeded, run.failed,
// run.canceled).
func IsFinalEvent(typ string) bool {
	st, ok := strings.CutPrefix(typ, "run.")
	return ok && RunStatus(st).Terminal()
}

// Terminal reports whether a run in status s has ended: succeeded, failed or
// canceled. A terminal run never changes again.
func (s RunStatus) Terminal() bool {
	return s == RunStatusSucceeded || s == RunStatusFailed || s == RunStatusCanceled
}

// maxEventSize bounds one server-sent event (an Event's JSON), so that a broken or
// hostile server cannot make the client buffer without limit.
const maxEventSize = 4 << 20

// FollowRun calls fn, in order, for each event of run id with a seq above after (0:
// from the first), as the run makes them, over the server-sent event stream GET
// /v1/runs/{id}/events/stream. It returns nil once fn had the run's final event
// (run.succeeded, run.failed or run.canceled), or once the run is over and fn had
// every event after after.
//
// When the stream drops (network trouble, a server restarting or shutting down,
// a 5xx or 429 answer), FollowRun reopens it with Last-Event-ID set to the last
// event fn had, after a growing wait (see FollowOptions): fn gets every event once,
// in seq order, with none missing. fn is never called concurrently, and it holds up
// the stream while it runs.
//
// FollowRun returns fn's error as it is when fn fails; ctx's error (wrapped) when
// ctx ends; a *Problem when the server refuses (404 for an unknown run, 401, 403);
// and an error wrapping the last failure after opts.MaxFailures connections in a row
// failed without bringing an event.
func (c *Client) FollowRun(ctx context.Context, id uuid.UUID, after int64, fn func(*Event) error, opts FollowOptions) error {
	opts = opts.withDefaults()
	op := fmt.Sprintf("follow run %s", id)
	last := max(after, 0)
	bo := newBackoff(opts.MinBackoff, opts.MaxBackoff)
	failures := 0
	for {
		before := last
		final, err := c.followOnce(ctx, id, &last, fn, opts.IdleTimeout)
		var fnErr *callbackError
		switch {
		case errors.As(err, &fnErr):
			return fnErr.err
		case final:
			return nil
		case ctx.Err() != nil:
			return ctxErr(ctx, op)
		case err != nil && !Retryable(err):
			return fmt.Errorf("%s: %w", op, err)
		case err != nil && opts.stopOnRefusal && refused(err):
			return fmt.Errorf("%s: %w", op, err)
		}
		if err == nil {
			// The server ended the stream without the final event: it is shutting
			// down, or the run was over when it looked (everything up to the final
			// event was sent before, or the run ended between two of its reads).
			// Ask which, and whether fn had every event.
			run, gerr := c.readRun(ctx, id)
			switch {
			case gerr == nil && run.Status.Terminal() && last >= run.Revision:
				return nil
			case gerr == nil && run.Status.Terminal():
				err = fmt.Errorf("the stream ended at event %d of the ended run's %d", last, run.Revision)
			case gerr == nil:
				err = errors.New("the server ended the stream before the run ended")
			case ctx.Err() != nil:
				return ctxErr(ctx, op)
			case !Retryable(gerr):
				return fmt.Errorf("%s: %w", op, gerr)
			default:
				err = gerr
			}
		}
		if last > before {
			failures = 0
			bo.Reset()
		}
		failures++
		if failures >= opts.MaxFailures {
			return fmt.Errorf("%s: the event stream failed %d times in a row: %w", op, failures, err)
		}
		delay := max(bo.NextBackOff(), retryAfter(err))
		opts.Logger.WarnContext(ctx, "event stream ended early; reconnecting", "run_id", id.String(), "after", last, "delay", delay, "error", err)
		if sleep(ctx, delay) != nil {
			return ctxErr(ctx, op)
		}
	}
}

// callbackError carries fn's error out of followOnce, to tell it from the stream's.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// refusedError is a server's error answer to opening the stream (as opposed to a
// stream that broke once open).
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

func refused(err error) bool {
	var r *refusedError
	var p *Problem
	return errors.As(err, &r) && errors.As(err, &p)
}

// followOnce reads one connection of the event stream, from the event after *last,
// calling fn for each new one and advancing *last. final reports that fn had the
// run's final event. err is nil when the server ended the stream itself.
func (c *Client) followOnce(ctx context.Context, id uuid.UUID, last *int64, fn func(*Event) error, idle time.Duration) (final bool, err error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	params := &StreamEventsParams{}
	if *last > 0 {
		lastID := strconv.FormatInt(*last, 10)
		params.LastEventID = &lastID
	}
	resp, err := c.send(ctx,
		func(server string) (*http.Request, error) { return NewStreamEventsRequest(server, id, params) },
		func() (*http.Response, error) { return c.StreamEvents(ctx, id, params) })
	if err != nil {
		return false, &refusedError{err: err}
	}
	defer resp.Body.Close()

	errIdle := fmt.Errorf("nothing arrived on the stream for %s", idle)
	watchdog := time.AfterFunc(idle, func() { cancel(errIdle) })
	defer watchdog.Stop()
	body := &activityReader{r: resp.Body, active: func() { watchdog.Reset(idle) }}

	final, err = readEvents(body, last, func(ev *Event) error {
		watchdog.Stop() // the time fn takes is not the server's silence
		defer watchdog.Reset(idle)
		return fn(ev)
	})
	var cbErr *callbackError
	if !final && !errors.As(err, &cbErr) && errors.Is(context.Cause(ctx), errIdle) {
		err = errIdle // the read failed, or ended, because the watchdog cut it
	}
	return final, err
}

// readEvents reads a text/event-stream of a run's events, calling fn for each
// event after *last and advancing *last. It stops at the end of r (final when the
// last event was a run's final one: the server ends the stream there), or at an error: of fn (a *callbackError), of reading, of a
// malformed event, or of an event out of order (a gap: the events after it must be
// read again after *last).
func readEvents(r io.Reader, last *int64, fn func(*Event) error) (final bool, err error) {
	for msg, err := range sse.Read(r, &sse.ReadConfig{MaxEventSize: maxEventSize}) {
		if err != nil {
			return false, fmt.Errorf("read event stream: %w", err)
		}
		if msg.Data == "" {
			continue
		}
		var ev Event
		if err := json.Unmarshal([]byte(msg.Data), &ev); err != nil {
			return false, fmt.Errorf("decode event %q: %w", msg.LastEventID, err)
		}
		switch {
		case ev.Seq <= *last:
			continue // replayed again: fn had it
		case ev.Seq != *last+1:
			// Seqs have no gaps: an event is missing from this stream. Reopen it
			// after the last one fn had rather than skip one.
			return false, fmt.Errorf("event %d came after %d: event %d missing", ev.Seq, *last, *last+1)
		}
		if err := fn(&ev); err != nil {
			return false, &callbackError{err: err}
		}
		*last = ev.Seq
		// The server ends the stream after the run's final event; a final event
		// followed by more (run.retried: the run runs again) is not the end.
		final = IsFinalEvent(ev.Type)
	}
	return final, nil
}

// activityReader calls active after every read that brought bytes.
type activityReader struct {
	r      io.Reader
	active func()
}

func (a *activityReader) Read(p []byte) (int, error) {
	n, err := a.r.Read(p)
	if n > 0 {
		a.active()
	}
	return n, err
}

// readRun reads run id, keeping a 503's Retry-After (see send).
func (c *Client) readRun(ctx context.Context, id uuid.UUID) (*Run, error) {
	resp, err := c.send(ctx,
		func(server string) (*http.Request, error) { return NewGetRunRequest(server, id) },
		func() (*http.Response, error) { return c.GetRun(ctx, id) })
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	parsed, err := ParseGetRunResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	if parsed.JSON200 == nil {
		return nil, fmt.Errorf("get run %s: %w", id, unexpectedAnswer(resp.StatusCode))
	}
	return parsed.JSON200, nil
}

// unexpectedAnswer is the error for a 2xx answer without the JSON body the
// operation promises.
func unexpectedAnswer(status int) error {
	return fmt.Errorf("unexpected answer (status %d, no JSON body)", status)
}
