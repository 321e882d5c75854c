package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Retryable reports whether a call that failed with err may succeed if tried again:
// network trouble, and answers of the server that say "not now" (5xx, 429 Too Many
// Requests, 408 Request Timeout). A refusal (another 4xx: bad input, not found, a
// token or role that does not do) is not, nor the end of a context. Only repeat
// calls that are safe to repeat: reads, and writes with an Idempotency-Key.
func Retryable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var p *Problem
	if errors.As(err, &p) {
		return p.Status >= 500 || p.Status == http.StatusTooManyRequests || p.Status == http.StatusRequestTimeout
	}
	return true
}

// maxRetryAfter caps the wait a server's Retry-After can ask for, so that a
// misconfigured proxy cannot park a client for hours.
const maxRetryAfter = 5 * time.Minute

// retryAfterError is an answer of the server (a *Problem) that said, in its
// Retry-After header, how long to wait before trying again.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// retryAfter is the wait the server asked for in err's chain, or 0.
func retryAfter(err error) time.Duration {
	var ra *retryAfterError
	if errors.As(err, &ra) {
		return ra.after
	}
	return 0
}

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date. It returns
// 0 when there is none or it cannot be read, and at most maxRetryAfter.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		if secs > int64(maxRetryAfter/time.Second) {
			return maxRetryAfter
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	return min(max(d, 0), maxRetryAfter)
}

// send sends req, made by one of the generated New…Request functions for the
// client's server, the way the generated operations do (the request editors set the
// bearer token), and returns a 2xx response whose body the caller closes. Other
// answers are *Problem errors, as everywhere in this package, wrapped with the
// Retry-After the server sent (see retryAfter), which the generated operations drop.
//
// build gets the server URL. fallback is the generated operation, used when c was
// not made by New (its transport is unknown): it works, without Retry-After when
// that transport turns error answers into errors itself.
func (c *Client) send(ctx context.Context, build func(server string) (*http.Request, error), fallback func() (*http.Response, error)) (*http.Response, error) {
	var resp *http.Response
	if ac, ok := c.ClientInterface.(*APIClient); ok {
		req, err := build(ac.Server)
		if err != nil {
			return nil, err
		}
		req = req.WithContext(ctx)
		for _, edit := range ac.RequestEditors {
			if err := edit(ctx, req); err != nil {
				return nil, err
			}
		}
		doer := ac.Client
		if pd, ok := doer.(problemDoer); ok {
			doer = pd.next // to see the headers of an error answer
		}
		if resp, err = doer.Do(req); err != nil {
			return nil, err
		}
	} else {
		var err error
		if resp, err = fallback(); err != nil {
			return nil, err
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxProblemSize))
	p := problemOf(resp, body)
	if d := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); d > 0 {
		return nil, &retryAfterError{err: p, after: d}
	}
	return nil, p
}

// newBackoff is the exponential backoff between reconnections: from first, doubling
// with ±20% jitter (so that clients dropped together do not come back together), up
// to most; it never stops by itself (callers count failures).
func newBackoff(first, most time.Duration) *backoff.ExponentialBackOff {
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(first),
		backoff.WithMaxInterval(most),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(0.2),
		backoff.WithMaxElapsedTime(0),
	)
	b.Reset()
	return b
}

// sleep waits d, or until ctx ends (its error).
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ctxErr wraps the end of ctx with what was being done.
func ctxErr(ctx context.Context, op string) error {
	return fmt.Errorf("%s: %w", op, ctx.Err())
}
