package catalog

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/lib/pq"
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
)

// translateError maps driver errors to the package's sentinels, keeping the original
// in the chain for logs. It is the only place that looks at driver error codes.
func translateError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	var pqErr *pq.Error
	if errors.As(err, &pqErr) {
		switch pqErr.Code {
		case "23505": // unique_violation
			return fmt.Errorf("%w: %w", ErrConflict, err)
		case "40001", "40P01": // serialization_failure, deadlock_detected
			return fmt.Errorf("%w: %w", ErrRetryable, err)
		}
	}
	return err
}

func isNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
