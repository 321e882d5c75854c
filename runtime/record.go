package runtime

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
)

// CodeInvalidOutput is the error code of a step whose value (its output, its
// error, a child run's input, a map's items) the catalog refused: a retry would
// give it the same value.
const CodeInvalidOutput = "invalid_output"

// Bounds of untilWritten's retries.
const (
	// maxWriteOutage is how long a write is retried while the database is
	// unavailable (or a transaction keeps losing races, or times out). An outage
	// shorter than this loses no outcome: once the database answers again, the
	// write is made before any sweeper takes the step (sweepGrace). Past it the
	// attempt is given up, and its step swept when its lease expires.
	maxWriteOutage = 10 * time.Minute
	// unknownErrorTries bounds the tries of a write that failed with an error
	// catalog.Transient does not know (a bug, a schema a rolling upgrade has not
	// reached yet): a few, in about a second and a half.
	unknownErrorTries = 5
)

// errWriteGivenUp ends untilWritten when a retry cannot help or must stop: the
// step's lease is no longer of use (the run was canceled) or the write kept
// failing past its bounds. Nothing was written; the step is swept when its lease
// expires (or is not running any more).
var errWriteGivenUp = errors.New("write given up")

// untilWritten writes what became of an attempt (its outcome, a suspension, a
// child run, a map's start) with write, retrying with a backoff doubling from 50
// ms to 500 ms while the database is unavailable (catalog.Transient): after an
// outage the sweepers wait two lease TTLs, so a write made late still counts. It
// returns nil once written, or the error that ends the tries:
//   - the lease is lost (counted under op in cairn_lease_lost_total);
//   - final says a retry cannot change it (the caller handles that one);
//   - the catalog refused a value (catalog.ErrInvalidInput, never retried: the
//     caller fails the step, refusedOutcome);
//   - the dispatcher stops (errAbandoned: the step is then swept and claimed
//     again);
//   - errWriteGivenUp: the attempt's run was canceled or its lease lost while
//     retrying, an unknown error failed unknownErrorTries times, or the database
//     stayed unavailable for maxWriteOutage.
//
// what names the write in the log.
func (d *Dispatcher) untilWritten(a *attempt, op, what string, final func(error) bool, write func() error) error {
	backoff := 50 * time.Millisecond
	start := time.Now()
	done := a.done
	for tries := 1; ; tries++ {
		err := write()
		transient := catalog.Transient(err)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, catalog.ErrLeaseLost):
			d.metrics.leaseLost.WithLabelValues(op).Inc()
			a.logger().Warn(what+" rejected: the lease is no longer ours", "error", err)
			return err
		case final != nil && final(err):
			return err
		case errors.Is(err, errAbandoned) || d.life.abandonCtx.Err() != nil:
			a.logger().Error("could not "+what+" before shutdown; the step will be swept and claimed again", "error", err)
			return err
		case errors.Is(err, catalog.ErrInvalidInput):
			a.logger().Warn("could not "+what+": the database refused a value of the step", "error", err)
			return err
		case !transient && tries >= unknownErrorTries:
			a.logger().Error("could not "+what+"; giving up: the step will be swept when its lease expires", "error", err, "tries", tries)
			return fmt.Errorf("%w: %w", errWriteGivenUp, err)
		case transient && time.Since(start) >= maxWriteOutage:
			a.logger().Error("could not "+what+" while the database was unavailable; giving up: the step will be swept when its lease expires",
				"error", err, "since", time.Since(start))
			return fmt.Errorf("%w: %w", errWriteGivenUp, err)
		}
		if transient {
			d.noteDBError()
		}
		a.logger().Warn(what+" failed; retrying", "error", err, "in", backoff)
		select {
		case <-d.life.abandonCtx.Done():
			a.logger().Error("could not "+what+" before shutdown; the step will be swept and claimed again", "error", err)
			return errAbandoned
		case <-done:
			if d.claiming() {
				// The attempt's context ends early for a canceled run or a lost
				// lease, and for a shutdown: in the first two nothing of ours may
				// be written any more.
				a.logger().Info("stopped trying to "+what+": the run was canceled or the lease lost", "error", err)
				return fmt.Errorf("%w: %w", errWriteGivenUp, err)
			}
			// A shutdown: the outcome is still ours to write, until Stop gives up.
			done = nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 500*time.Millisecond)
	}
}

// suspendWritten is untilWritten for a write that suspends a step (a wait, a
// callback, a map's start, a child run's start): a value the catalog refuses
// fails the step for good (refusedOutcome, value naming it), and the error is
// returned all the same.
func (d *Dispatcher) suspendWritten(a *attempt, what, value string, final func(error) bool, write func() error) error {
	err := d.untilWritten(a, "suspend", what, final, write)
	if errors.Is(err, catalog.ErrInvalidInput) {
		d.report(a, refusedOutcome(value, err), nil)
	}
	return err
}

// refusedOutcome is the failure of a step whose value the catalog refused
// (catalog.ErrInvalidInput): terminal, code invalid_output, its message naming
// the value and what the database said ("output: PostgreSQL refused the value:
// unsupported Unicode escape sequence (22P05)").
func refusedOutcome(value string, err error) outcome {
	return outcome{status: catalog.OutcomeFailed,
		err: &functions.Error{Message: value + ": " + catalog.Refused(err), Code: CodeInvalidOutput}}
}

// storableMessage is a failure's message as the catalog stores it: a NUL
// character (from a handler's stderr, its error control message, an endpoint's
// answer) becomes U+FFFD, as invalid UTF-8 does when the error is encoded. The
// message is text for people: losing the failure over one character would be
// worse.
func storableMessage(msg string) string {
	return strings.ReplaceAll(msg, "\x00", "\uFFFD")
}
