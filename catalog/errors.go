package catalog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/lib/pq"
	"github.com/lib/pq/pqerror"
)

// Errors returned by Store methods; check with errors.Is.
var (
	// ErrNotFound means the row asked for does not exist.
	ErrNotFound = errors.New("catalog: not found")
	// ErrConflict means a unique key or a state precondition was violated.
	ErrConflict = errors.New("catalog: conflict")
	// ErrRetryable means the transaction lost a serialization race or a deadlock and
	// may be tried again as a whole.
	ErrRetryable = errors.New("catalog: retryable transaction failure")
	// ErrLeaseLost means a write carried a lease token that is no longer current:
	// nothing was written.
	ErrLeaseLost = errors.New("catalog: lease lost")
	// ErrUnavailable means the database cannot be reached or is not accepting
	// connections now (refused or dropped connection, shutting down, starting up,
	// out of connection slots), or is a server that only reads (a standby, after
	// a failover: SQLSTATE 25006); try again later. Whether a write that failed so was
	// committed is unknown.
	ErrUnavailable = errors.New("catalog: database unavailable")
	// ErrInvalidInput means the database refused a value of the statement's input:
	// a data exception (SQLSTATE class 22: text with a NUL character, invalid UTF-8
	// or, in JSON, a \u0000 or an unpaired surrogate escape, a number out of its
	// column's range, a string too long for its column, a date out of range) or a
	// value past one of PostgreSQL's limits (class 54: a jsonb over 255 MB). Nothing
	// was written, and the same value is refused again: it is never worth a retry.
	// Refused says what was refused. Callers should have checked their input; this
	// is the last line of defence, the caller's fault rather than the database's.
	//
	// A violated constraint (class 23) is not one: the catalog's constraints guard
	// its own state (a step's status, counters, names a deploy checked), not the
	// values steps produce, so a violation other than a unique key (ErrConflict)
	// is Cairn's fault and stays untranslated.
	ErrInvalidInput = errors.New("catalog: invalid input")
	// ErrForbidden means the caller's role may not do this to this row (an approval
	// step decided by a role not among its roles). Nothing was written; Reason says
	// which roles may.
	ErrForbidden = errors.New("catalog: forbidden")
)

// SQLSTATEs of the class CA, which the catalog's functions raise (migrations).
const (
	// sqlstateNotFound: the row the call is about does not exist (cairn_run_cancel).
	sqlstateNotFound pq.ErrorCode = "CA404"
	// sqlstateRunFinished: the run has already ended (cairn_run_cancel).
	sqlstateRunFinished pq.ErrorCode = "CA409"
	// sqlstateBadOutcome: an outcome cairn_step_finish does not take (an unknown
	// one, or succeeded: successes go through cairn_steps_succeed).
	sqlstateBadOutcome pq.ErrorCode = "CA400"
	// sqlstateRunState: the run is not in a state the action applies to (retry of a
	// running run, pause of a finished one). The message says which state.
	sqlstateRunState pq.ErrorCode = "CAR09"
	// sqlstateIncompatibleVersion: the version asked for does not have the steps the
	// action keeps, with the same key and needs. The message names them.
	sqlstateIncompatibleVersion pq.ErrorCode = "CAV09"
	// sqlstateInvalidArgument: an argument names something that does not exist in
	// the run or workflow (an unknown step). The message names it.
	sqlstateInvalidArgument pq.ErrorCode = "CA422"
	// sqlstateNothingToRollBack: an alias has no earlier version to go back to
	// (cairn_alias_rollback). The message says which version it names.
	sqlstateNothingToRollBack pq.ErrorCode = "CAA09"
	// sqlstateForbidden: the caller's role may not decide the step
	// (cairn_step_decide). The message names the roles that may.
	sqlstateForbidden pq.ErrorCode = "CA403"
)

// ErrRunState means the run is not in a state the action applies to (retrying a
// run that has not ended, pausing one that has). It wraps ErrConflict; Reason
// says which state.
var ErrRunState = fmt.Errorf("%w: the run's state does not allow this", ErrConflict)

// ErrCallbackNotWaiting means a callback's step no longer waits for the callback
// of that attempt: it was completed already, timed out, canceled, or runs again.
// It wraps ErrRunState.
var ErrCallbackNotWaiting = fmt.Errorf("%w: the step no longer waits for this callback", ErrRunState)

// ErrIncompatibleVersion means a run cannot move onto the version asked for: the
// steps it keeps do not all exist there with the same key and needs. It wraps
// ErrConflict; Reason names the steps.
var ErrIncompatibleVersion = fmt.Errorf("%w: incompatible version", ErrConflict)

// Reason returns the message a catalog function raised with one of Cairn's own
// SQLSTATEs (what the caller asked for that cannot be done, naming runs, steps and
// states, never data), or "" for any other error. It is fit to show a client.
func Reason(err error) string {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && strings.HasPrefix(string(pqErr.Code), "CA") {
		return pqErr.Message
	}
	return ""
}

// translateError maps driver errors to the package's sentinels, keeping the original
// in the chain for logs. It is the only place that looks at driver error codes. An
// error translated before is returned as it is.
func translateError(err error) error {
	if err == nil || isTranslated(err) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %w", ErrConflict, err)
		// Cairn's own codes, raised by the catalog's functions for a whole call that
		// cannot be done (per-item results are their return values instead).
		case sqlstateNotFound:
			return fmt.Errorf("%w: %w", ErrNotFound, err)
		case sqlstateRunFinished:
			return fmt.Errorf("%w: %w", ErrRunFinished, err)
		case sqlstateBadOutcome, sqlstateInvalidArgument:
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		case sqlstateRunState:
			return fmt.Errorf("%w: %w", ErrRunState, err)
		case sqlstateIncompatibleVersion:
			return fmt.Errorf("%w: %w", ErrIncompatibleVersion, err)
		case sqlstateNothingToRollBack:
			return fmt.Errorf("%w: %w", ErrNothingToRollBack, err)
		case sqlstateForbidden:
			return fmt.Errorf("%w: %w", ErrForbidden, err)
		case sqlstateQuota:
			return quotaError(pqErr)
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
		if isDataError(pqErr.Code) {
			return fmt.Errorf("%w: %w", ErrInvalidInput, err)
		}
	}
	if isUnavailable(err) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// isDataError reports whether code says the statement's values were refused:
// class 22 (22021 a NUL or invalid UTF-8 in text, 22P05 a \u0000 in jsonb, 22P02
// invalid json such as an unpaired surrogate, 22003 a number beyond its column,
// 22001 a string longer than its column, 22008 a timestamp out of range, …) and
// class 54 (54000 a jsonb array or object over 255 MB, …).
func isDataError(code pq.ErrorCode) bool {
	switch code.Class() {
	case pqerror.ClassDataException, pqerror.ClassProgramLimitExceeded:
		return true
	}
	return false
}

// maxRefusal bounds the database's message in Refused: some messages quote the
// value (22P02 "invalid input syntax for type integer: …").
const maxRefusal = 200

// Refused says what the database said when it refused a value of a statement's
// input (ErrInvalidInput): "PostgreSQL refused the value: unsupported Unicode
// escape sequence (22P05)", the message without its detail (which may quote the
// value). It is "" for any other error. The text is valid UTF-8 without NUL
// characters, at most a few hundred bytes: fit to store as a step's error and to
// show its viewers.
func Refused(err error) string {
	if !errors.Is(err, ErrInvalidInput) {
		return ""
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		return fmt.Sprintf("PostgreSQL refused the value: %s (%s)", storableText(pqErr.Message, maxRefusal), pqErr.Code)
	}
	_, why, _ := strings.Cut(err.Error(), ErrInvalidInput.Error()+": ")
	return "the catalog refused the value: " + storableText(why, maxRefusal)
}

// storableText is s as text PostgreSQL stores, cut to about n bytes ("…" added):
// invalid UTF-8 (a character the cut split, too) and NUL characters become U+FFFD.
func storableText(s string, n int) string {
	if len(s) > n {
		s = s[:n] + "…"
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// Transient reports whether a call that failed with err may succeed if made
// again unchanged, without anything else changing first: the database is
// unavailable (ErrUnavailable), a transaction lost a race (ErrRetryable), the call
// ran out of time (its context's deadline, a statement canceled by
// statement_timeout, a lock_timeout), or the server lacked a resource for a
// moment (class 53: out of memory, disk full, out of connections). A refused
// value (ErrInvalidInput), an answer about the call (ErrNotFound, ErrConflict,
// ErrLeaseLost, ErrForbidden), a caller that gave up (context.Canceled) and an
// error the catalog does not know are not.
func Transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, ErrInvalidInput), errors.Is(err, ErrLeaseLost), errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrRetryable), errors.Is(err, context.DeadlineExceeded):
		return true
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case pqerror.QueryCanceled, pqerror.LockNotAvailable:
			return true
		}
		return pqErr.Code.Class() == pqerror.ClassInsufficientResources
	}
	return isUnavailable(err)
}

func isTranslated(err error) bool {
	for _, s := range []error{ErrNotFound, ErrConflict, ErrRetryable, ErrLeaseLost, ErrUnavailable, ErrInvalidInput, ErrForbidden,
		ErrQuotaExceeded} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// isUnavailable reports whether err says the database cannot be reached or does not
// take connections now, as opposed to a fault of the statement or the data.
func isUnavailable(err error) bool {
	if errors.Is(err, context.Canceled) {
		// The caller gave up (a dial interrupted by cancellation is a *net.OpError
		// too): that says nothing about the database.
		return false
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case pqerror.AdminShutdown, // 57P01: the server is shutting down (fast or smart)
			pqerror.CrashShutdown,          // 57P02: another backend crashed, all are reset
			pqerror.CannotConnectNow,       // 57P03: "the database system is starting up" (or shutting down)
			pqerror.TooManyConnections,     // 53300: out of connection slots
			pqerror.ReadOnlySQLTransaction: // 25006: a write on a standby, or a primary demoted by a failover (conn.go)
			return true
		}
		return strings.HasPrefix(string(pqErr.Code), string(pqerror.ClassConnectionException)) // 08xxx
	}
	// lib/pq refuses a server that only reads at connect time when the URL asks
	// for target_session_attrs=read-write (a multi-host URL after a failover, or
	// before the standby is promoted) with an error of no type of its own.
	if msg := err.Error(); strings.Contains(msg, "server is in hot standby mode") || strings.Contains(msg, "session is read-only") {
		return true
	}
	// lib/pq reports a connection that broke under a statement as driver.ErrBadConn
	// (database/sql then retries on a fresh one, if it can) or passes the read's
	// io.EOF or network error through.
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	// Dialing: refused, reset, unreachable, DNS, and a connect_timeout or a context
	// deadline that ran out while connecting (a net.OpError of the dial), or a read
	// or write on a connection that broke.
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(err, &opErr) || errors.As(err, &dnsErr) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) && !errors.Is(err, context.DeadlineExceeded) {
		// context.DeadlineExceeded is a net.Error too, but on its own it is the
		// caller's deadline running out (a slow statement, a full pool), not an
		// outage.
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED,
		syscall.EPIPE, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
