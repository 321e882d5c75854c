package client

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// WaitOptions tune WaitRun. The zero value means every default.
type WaitOptions struct {
	// PollInterval is how often WaitRun reads the run when it cannot follow the
	// run's event stream: the server refused it (a 503 when it has its maximum of
	// streams open) or it kept failing. Default 1s.
	PollInterval time.Duration
	// Follow tunes the event stream WaitRun follows: the backoff between
	// reconnections and how many failures in a row it takes (then WaitRun polls).
	// MaxFailures also bounds the failed reads in a row while polling.
	Follow FollowOptions
}

func (o WaitOptions) withDefaults() WaitOptions {
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	o.Follow = o.Follow.withDefaults()
	return o
}

// WaitRun waits until run id has ended (succeeded, failed or canceled) and returns
// it, whatever its status: a run that failed is not an error of WaitRun; look at
// the run's Status and Error.
//
// It follows the run's event stream (see FollowRun) rather than asking over and
// over, and reads the run again once the final event arrived. When the server
// refuses the stream, or the stream fails opts.Follow.MaxFailures times in a row,
// WaitRun polls the run every opts.PollInterval instead. Reads that fail for a
// reason that may pass (see Retryable) are tried again, waiting at least the
// Retry-After of a 503, up to opts.Follow.MaxFailures times in a row.
//
// Bound the wait with ctx: WaitRun returns ctx's error (wrapped) when ctx ends
// first. Errors of the server that will not pass (404 for an unknown run, 401,
// 403) are returned at once as *Problem errors.
func (c *Client) WaitRun(ctx context.Context, id uuid.UUID, opts WaitOptions) (*Run, error) {
	opts = opts.withDefaults()
	op := fmt.Sprintf("wait for run %s", id)
	run, err := c.readRun(ctx, id)
	switch {
	case err == nil && run.Status.Terminal():
		return run, nil
	case ctx.Err() != nil:
		return nil, ctxErr(ctx, op)
	case err != nil && !Retryable(err):
		return nil, err
	}
	var after int64
	if run != nil {
		after = run.Revision // the events until now do not matter: start after them
	}
	follow := opts.Follow
	follow.stopOnRefusal = true
	ferr := c.FollowRun(ctx, id, after, func(*Event) error { return nil }, follow)
	switch {
	case ctx.Err() != nil:
		return nil, ctxErr(ctx, op)
	case ferr != nil && !Retryable(ferr):
		return nil, ferr
	case ferr != nil:
		opts.Follow.Logger.WarnContext(ctx, "cannot follow the run's event stream; polling", "run_id", id.String(), "error", ferr)
	}
	return c.pollRun(ctx, id, opts)
}

// pollRun reads run id until it has ended: every opts.PollInterval, or after a
// failed read the longer of the backoff and the server's Retry-After.
func (c *Client) pollRun(ctx context.Context, id uuid.UUID, opts WaitOptions) (*Run, error) {
	op := fmt.Sprintf("wait for run %s", id)
	bo := newBackoff(opts.Follow.MinBackoff, opts.Follow.MaxBackoff)
	failures := 0
	for {
		run, err := c.readRun(ctx, id)
		var delay time.Duration
		switch {
		case err == nil && run.Status.Terminal():
			return run, nil
		case ctx.Err() != nil:
			return nil, ctxErr(ctx, op)
		case err == nil:
			failures = 0
			bo.Reset()
			delay = opts.PollInterval
		case !Retryable(err):
			return nil, err
		default:
			failures++
			if failures >= opts.Follow.MaxFailures {
				return nil, fmt.Errorf("%s: reading the run failed %d times in a row: %w", op, failures, err)
			}
			delay = max(bo.NextBackOff(), retryAfter(err))
		}
		if sleep(ctx, delay) != nil {
			return nil, ctxErr(ctx, op)
		}
	}
}
