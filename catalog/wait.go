package catalog

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
)

// Durable waits. A step that waits (a sleep, a signal, an approval, a
// callback) is suspended: it holds no lease, no dispatcher slot and no memory, only
// its row. It is woken by the SQL of catalog/sql/waits.sql: the sweeper (WakeDue, run by
// every dispatcher) for due sleeps and timeouts, SignalSend for signals, StepResolve
// for whatever else completes a wait.

const (
	sqlStepSuspend = `SELECT cairn_step_suspend($1, $2, $3, $4, $5, $6, $7, $8)
WHERE cairn_runs_share(ARRAY[$1::uuid])`
	sqlCallbackTake = `SELECT cairn_callback_take($1, $2)`
	// The log of the attempt a suspend ended (the step's latest).
	sqlAttemptSetLog = `
UPDATE attempts a SET log_key = $3
  FROM steps s
 WHERE s.run_id = $1 AND s.key = $2
   AND a.run_id = s.run_id AND a.step_key = s.key AND a.number = s.attempts`
	sqlStepResolve = `SELECT cairn_step_resolve($1, $2, $3, $4, $5, $6)
WHERE cairn_runs_share(ARRAY[$1::uuid])`
	sqlWakeNext = `SELECT cairn_wake_next()`
	// The earliest due wait (the index steps_wake_idx answers it), or a child
	// run's end left for the sweeper (child_run_ends), if earlier.
	sqlNextWake = `
SELECT least((SELECT min(least(wait_until, timeout_at)) FROM steps WHERE status = 'suspended' AND NOT held),
             (SELECT min(ended_at) FROM child_run_ends))`
	sqlSignalSend = `SELECT seq, step, duplicate FROM cairn_signal_send($1, $2, $3, $4, $5)`
	// Whether the signal first sent under an idempotency key has payload $4 (jsonb
	// equality: the same JSON however spelled; a $blob reference names its bytes'
	// digest, so the same bytes).
	sqlSignalSamePayload = `
SELECT payload = $4::jsonb FROM signals WHERE run_id = $1 AND name = $2 AND idempotency_key = $3`
)

// WaitKind is what a suspended step waits for (Step.WaitKind).
type WaitKind string

// Wait kinds.
const (
	WaitSleep    WaitKind = "sleep"
	WaitSignal   WaitKind = "signal"
	WaitApproval WaitKind = "approval"
	WaitCallback WaitKind = "callback"
	// WaitChildRun: a workflow step waits for its child run (child.go).
	WaitChildRun WaitKind = "child_run"
	// WaitEvent: a wait_for_event step waits for a received event
	// (received_event.go).
	WaitEvent WaitKind = "event"
)

// OnTimeout is what a wait does when its timeout passes.
type OnTimeout string

// What a wait does at its timeout.
const (
	// OnTimeoutFail: the step fails (terminal), error code "timeout".
	OnTimeoutFail OnTimeout = "fail"
	// OnTimeoutContinue: the step succeeds with a null output.
	OnTimeoutContinue OnTimeout = "continue"
)

// ErrorCodeTimeout is the error code of a wait that timed out with on_timeout fail.
const ErrorCodeTimeout = "timeout"

// Wait describes what a step suspends for (StepSuspend).
type Wait struct {
	Kind WaitKind
	// Until is a sleep's end (required for WaitSleep).
	Until time.Time
	// Name is a signal's name (required for WaitSignal).
	Name string
	// TimeoutAt is when the wait gives up; zero: never.
	TimeoutAt time.Time
	// OnTimeout is fail (the default) or continue.
	OnTimeout OnTimeout
	// LogKey is the blob key of the ending attempt's log (stderr), kept on its
	// attempt; empty: none (a builtin wait has no log).
	LogKey string
}

// StepSuspend ends a running attempt by suspending its step, fenced by the lease
// token: the step gives up its lease and waits as w says (cairn_step_suspend: its
// attempt ends succeeded; step.suspended). A signal step that finds a buffered
// signal of its name takes it and succeeds at once, and so does a callback wait
// whose callback came already (CallbackComplete); a wait already due is woken at
// once. ErrLeaseLost when the token is not the step's lease (nothing is written);
// ErrInvalidInput for a wait without its kind's fields.
func (s *Store) StepSuspend(ctx context.Context, l Lease, w Wait) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if err := suspendTx(ctx, tx, l, w); err != nil {
			return err
		}
		if w.Kind == WaitCallback {
			// A callback that came before the function's answer.
			var took bool
			return tx.GetContext(ctx, &took, sqlCallbackTake, l.RunID, l.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("suspend step %s/%s: %w", l.RunID, l.Key, err)
	}
	return nil
}

// suspendTx suspends the step l holds in tx as w says (sqlStepSuspend), and
// records the attempt's log key: ErrLeaseLost when l no longer holds it.
func suspendTx(ctx context.Context, tx *sqlx.Tx, l Lease, w Wait) error {
	var ok bool
	if err := tx.GetContext(ctx, &ok, sqlStepSuspend, l.RunID, l.Key, l.Token, string(w.Kind),
		nullTime(w.Until), nullString(w.Name), nullTime(w.TimeoutAt), nullString(string(w.OnTimeout))); err != nil {
		return err
	}
	if !ok {
		return ErrLeaseLost
	}
	if w.LogKey != "" {
		if _, err := tx.ExecContext(ctx, sqlAttemptSetLog, l.RunID, l.Key, w.LogKey); err != nil {
			return err
		}
	}
	return nil
}

// Resolution ends a suspended step (StepResolve).
type Resolution struct {
	// Outcome is OutcomeSucceeded or OutcomeFailed (terminal).
	Outcome Outcome
	// Output is the step's output on success (inline JSON or a $blob reference).
	Output json.RawMessage
	// Error is the step's error on failure ({"message", "code"}).
	Error json.RawMessage
	// Reason says why, in the step.resumed event (approved, callback, …).
	Reason string
}

// StepResolve ends a suspended step as r says (cairn_step_resolve): its dependents
// become ready or are skipped, and the run may end. ErrRunState when the step is not
// suspended (a late or repeated completion: nothing is written), ErrNotFound for no
// such step, ErrInvalidInput for another outcome.
func (s *Store) StepResolve(ctx context.Context, runID uuid.UUID, key string, r Resolution) error {
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, sqlStepResolve, runID, key, string(r.Outcome), nullJSON(r.Output),
			nullJSON(r.Error), nullString(r.Reason))
		return err
	})
	if err != nil {
		return fmt.Errorf("resolve step %s/%s: %w", runID, key, err)
	}
	return nil
}

// WakeDue wakes up to limit due waits (cairn_wake_next, one a transaction):
// sleeps whose time has come succeed, waits whose timeout passed fail (code
// timeout) or continue. Steps of a paused run wait for its resume, and a run
// being canceled, paused or retried at that moment is left to the next call. Safe
// from every dispatcher at once: each step is woken once. Returns how many it
// woke; fewer than limit when no more were due or free.
func (s *Store) WakeDue(ctx context.Context, limit int) (int, error) {
	n, err := s.eachNext(ctx, sqlWakeNext, limit)
	if err != nil {
		return n, fmt.Errorf("wake due waits: %w", err)
	}
	return n, nil
}

// eachNext runs query, a sweeper's step (cairn_wake_next, cairn_queue_timeout_next:
// 1 when it ended a step, 0 when none was due, -1 when the due ones were busy), in
// a transaction of its own up to limit times, and returns how many steps it
// ended. One step a transaction takes one run's locks at a time, in the order of
// catalog/sql/run_control.sql.
func (s *Store) eachNext(ctx context.Context, query string, limit int) (int, error) {
	n := 0
	for n < limit {
		var got int
		if err := s.inTx(ctx, func(tx *sqlx.Tx) error {
			return tx.GetContext(ctx, &got, query)
		}); err != nil {
			return n, err
		}
		if got <= 0 {
			break
		}
		n++
	}
	return n, nil
}

// NextWake returns when WakeDue may next find a due wait: the earliest end of a
// sleep or timeout of a suspended step that is not held. The zero time when none.
func (s *Store) NextWake(ctx context.Context) (time.Time, error) {
	var t *time.Time
	if err := s.db.GetContext(ctx, &t, sqlNextWake); err != nil {
		return time.Time{}, fmt.Errorf("next wake: %w", translateError(err))
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// Signal is a signal to deliver to a run (SignalSend).
type Signal struct {
	RunID uuid.UUID
	Name  string
	// Payload is the JSON body, or a $blob reference.
	Payload json.RawMessage
	// IdempotencyKey makes a repeat the same signal; "" for none.
	IdempotencyKey string
	Actor          string
}

// SignalResult is what became of a signal.
type SignalResult struct {
	// Seq orders the run's signals (global, increasing).
	Seq int64 `db:"seq"`
	// Step is the step it completed; nil while it is buffered.
	Step *string `db:"step"`
	// Duplicate is true when the idempotency key was seen before: nothing was
	// written, Seq and Step are the first delivery's.
	Duplicate bool `db:"duplicate"`
}

// SignalSend delivers a signal (cairn_signal_send): to the step of the run waiting
// for its name, or buffered, in order, for the next one. ErrNotFound for no such
// run, ErrRunFinished for a run that has ended, ErrIdempotencyMismatch for an
// idempotency key first sent (to that run and name) with another payload. The
// caller checks that the run's version has a signal step of that name.
func (s *Store) SignalSend(ctx context.Context, sig *Signal) (*SignalResult, error) {
	var out SignalResult
	err := s.inTx(ctx, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx, sqlRunShare, sig.RunID); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &out, sqlSignalSend, sig.RunID, sig.Name, JSON(sig.Payload),
			nullString(sig.IdempotencyKey), sig.Actor); err != nil {
			return err
		}
		if !out.Duplicate {
			return nil
		}
		var same bool
		if err := tx.GetContext(ctx, &same, sqlSignalSamePayload, sig.RunID, sig.Name, sig.IdempotencyKey,
			JSON(sig.Payload)); err != nil {
			return err
		}
		if !same {
			return fmt.Errorf("%w: signal %d was sent under idempotency key %q with another payload",
				ErrIdempotencyMismatch, out.Seq, sig.IdempotencyKey)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("signal %s to run %s: %w", sig.Name, sig.RunID, err)
	}
	return &out, nil
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}
