package runtime

import (
	"errors"
	"time"

	"github.com/cairnrun/cairn/catalog"
)

// untilWritten writes what became of an attempt (its outcome, a suspension, a
// child run, a map's start) with write, retrying a database error with a backoff
// doubling from 50 ms to 500 ms: after an outage the sweepers wait two lease TTLs,
// so a write made late still counts. It returns nil once written, or the error
// that ends the tries: the lease is lost (counted under op in
// cairn_lease_lost_total), the dispatcher stops (the step is then swept and
// claimed again), or final says a retry cannot change it (the caller handles
// that one). what names the write in the log.
func (d *Dispatcher) untilWritten(a *attempt, op, what string, final func(error) bool, write func() error) error {
	backoff := 50 * time.Millisecond
	for {
		err := write()
		switch {
		case err == nil:
			return nil
		case errors.Is(err, catalog.ErrLeaseLost):
			d.metrics.leaseLost.WithLabelValues(op).Inc()
			a.logger().Warn(what+" rejected: the lease is no longer ours", "error", err)
			return err
		case final != nil && final(err):
			return err
		case errors.Is(err, errAbandoned) || d.abandonCtx.Err() != nil:
			a.logger().Error("could not "+what+" before shutdown; the step will be swept and claimed again", "error", err)
			return err
		}
		d.noteDBError()
		a.logger().Warn(what+" failed; retrying", "error", err, "in", backoff)
		select {
		case <-d.abandonCtx.Done():
			a.logger().Error("could not "+what+" before shutdown; the step will be swept and claimed again", "error", err)
			return errAbandoned
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}
