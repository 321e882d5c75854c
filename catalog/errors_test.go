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
	"syscall"
	"testing"

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
