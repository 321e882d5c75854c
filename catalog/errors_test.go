package catalog

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

func TestTranslateError(t *testing.T) {
	t.Parallel()
	pqErr := func(code string) error { return &pq.Error{Severity: "FATAL", Code: pq.ErrorCode(code), Message: "m"} }
	dial := func(err error) error {
		return &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	tests := []struct {
		name string
		err  error
		want error // nil: none of the sentinels
	}{
		{name: "starting up", err: pqErr("57P03"), want: ErrUnavailable},
		{name: "connection failure", err: pqErr("08006"), want: ErrUnavailable},
		{name: "cannot establish connection", err: pqErr("08001"), want: ErrUnavailable},
		{name: "too many connections", err: pqErr("53300"), want: ErrUnavailable},
		{name: "admin shutdown", err: pqErr("57P01"), want: ErrUnavailable},
		{name: "crash shutdown", err: pqErr("57P02"), want: ErrUnavailable},
		{name: "wrapped pq error", err: fmt.Errorf("begin: %w", pqErr("57P03")), want: ErrUnavailable},
		{name: "bad conn", err: driver.ErrBadConn, want: ErrUnavailable},
		{name: "eof", err: io.EOF, want: ErrUnavailable},
		{name: "unexpected eof", err: io.ErrUnexpectedEOF, want: ErrUnavailable},
		{name: "refused", err: dial(os.NewSyscallError("connect", syscall.ECONNREFUSED)), want: ErrUnavailable},
		{name: "reset", err: &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, want: ErrUnavailable},
		{name: "bare errno", err: fmt.Errorf("write: %w", syscall.EPIPE), want: ErrUnavailable},
		{name: "connect deadline", err: dial(context.DeadlineExceeded), want: ErrUnavailable},
		{name: "dns", err: &net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}, want: ErrUnavailable},
		{name: "unique violation", err: pqErr("23505"), want: ErrConflict},
		{name: "serialization failure", err: pqErr("40001"), want: ErrRetryable},
		{name: "no rows", err: sql.ErrNoRows, want: ErrNotFound},
		{name: "cairn: not found", err: pqErr("CA404"), want: ErrNotFound},
		{name: "cairn: run finished", err: pqErr("CA409"), want: ErrRunFinished},
		{name: "cairn: bad outcome", err: pqErr("CA400"), want: ErrInvalidInput},
		{name: "jsonb \\u0000", err: pqErr("22P05"), want: ErrInvalidInput},
		{name: "timestamp out of range", err: pqErr("22008"), want: ErrInvalidInput},
		{name: "jsonb too large", err: pqErr("54000"), want: ErrInvalidInput},
		{name: "check violation", err: pqErr("23514")},
		{name: "not null violation", err: pqErr("23502")},
		{name: "undefined table", err: pqErr("42P01")},
		{name: "query canceled", err: pqErr("57014")},
		{name: "caller canceled the dial", err: dial(context.Canceled)},
		{name: "caller canceled", err: context.Canceled},
		{name: "caller deadline", err: context.DeadlineExceeded},
		{name: "other", err: errors.New("boom")},
	}
	sentinels := []error{ErrNotFound, ErrConflict, ErrRunFinished, ErrRetryable, ErrLeaseLost, ErrUnavailable, ErrInvalidInput}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := translateError(tt.err)
			require.ErrorIs(t, got, tt.err, "the original stays in the chain")
			for _, s := range sentinels {
				// ErrRunFinished is an ErrConflict too.
				require.Equal(t, tt.want != nil && errors.Is(tt.want, s), errors.Is(got, s), "errors.Is(%v, %v)", got, s)
			}
			require.Equal(t, got.Error(), translateError(got).Error(), "translating twice changes nothing")
		})
	}
	require.NoError(t, translateError(nil))
}

// TestTransient: only what may pass when tried again unchanged is transient; a
// refused value, an answer about the call and an unknown error are not (a refused
// value was once retried for ever).
func TestTransient(t *testing.T) {
	t.Parallel()
	pqErr := func(code string) error { return &pq.Error{Severity: "ERROR", Code: pq.ErrorCode(code), Message: "m"} }
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{name: "unavailable", err: translateError(pqErr("57P03")), want: true},
		{name: "connection refused", err: translateError(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}), want: true},
		{name: "serialization failure", err: translateError(pqErr("40001")), want: true},
		{name: "deadline", err: fmt.Errorf("finish: %w", context.DeadlineExceeded), want: true},
		{name: "statement timeout", err: translateError(pqErr("57014")), want: true},
		{name: "lock timeout", err: translateError(pqErr("55P03")), want: true},
		{name: "disk full", err: translateError(pqErr("53100")), want: true},
		{name: "out of memory", err: translateError(pqErr("53200")), want: true},
		{name: "jsonb \\u0000", err: translateError(pqErr("22P05"))},
		{name: "NUL in text", err: translateError(pqErr("22021"))},
		{name: "jsonb too large", err: translateError(pqErr("54000"))},
		{name: "check violation", err: translateError(pqErr("23514"))},
		{name: "unique violation", err: translateError(pqErr("23505"))},
		{name: "lease lost", err: fmt.Errorf("finish: %w", ErrLeaseLost)},
		{name: "not found", err: translateError(sql.ErrNoRows)},
		{name: "caller canceled", err: context.Canceled},
		{name: "undefined function", err: translateError(pqErr("42883"))},
		{name: "other", err: errors.New("boom")},
		{name: "nil"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, Transient(tt.err), tt.name)
	}
}

// TestRefused: the message of a refused value names the database's reason and
// code, never the value, and is text PostgreSQL stores.
func TestRefused(t *testing.T) {
	t.Parallel()
	err := translateError(fmt.Errorf("finish 3 steps: %w", &pq.Error{Code: "22P05", Message: "unsupported Unicode escape sequence",
		Detail: "\\u0000 cannot be converted to text."}))
	require.Equal(t, "PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)", Refused(err))

	long := translateError(&pq.Error{Code: "22P02", Message: "invalid input syntax for type integer: \"" + strings.Repeat("é", 300) + "\x00\xff\""})
	got := Refused(long)
	require.True(t, utf8.ValidString(got), "%q", got)
	require.NotContains(t, got, "\x00")
	require.Less(t, len(got), 300, "cut")
	require.Contains(t, got, "(22P02)")

	require.Equal(t, "the catalog refused the value: priority 12 is not within 0..9",
		Refused(fmt.Errorf("create run: %w: priority 12 is not within 0..9", ErrInvalidInput)))
	require.Empty(t, Refused(translateError(&pq.Error{Code: "57P03"})))
	require.Empty(t, Refused(errors.New("boom")))
	require.Empty(t, Refused(nil))
}
