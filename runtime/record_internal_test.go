package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// TestUntilWrittenBounded: a write is retried only while the database is
// unavailable; a refused value is not retried, an error the catalog does not know
// is tried a few times, and a run canceled meanwhile ends the tries (every such
// write was once retried every 500 ms for ever).
func TestUntilWrittenBounded(t *testing.T) {
	t.Parallel()
	d, err := New(nil, nil, &Config{Handlers: HandlerConfig{CacheDir: t.TempDir()}})
	require.NoError(t, err)
	newAttempt := func() (*attempt, context.CancelCauseFunc) {
		ctx, cancel := context.WithCancelCause(context.Background())
		t.Cleanup(func() { cancel(nil) })
		return &attempt{cancel: cancel, done: ctx.Done(), base: d.logger}, cancel
	}
	refused := fmt.Errorf("finish 1 steps: %w: %w", catalog.ErrInvalidInput, &pq.Error{Code: "22P05", Message: "unsupported Unicode escape sequence"})
	unavailable := fmt.Errorf("finish 1 steps: %w", catalog.ErrUnavailable)
	tests := []struct {
		name      string
		errs      []error // the answers of the first tries; nil once they are used up
		cancel    int     // the try after which the run is canceled; 0: never
		want      error
		wantTries int
	}{
		{name: "written", wantTries: 1},
		{name: "unavailable, then written", errs: []error{unavailable, unavailable, unavailable}, wantTries: 4},
		{name: "refused", errs: []error{refused, refused}, want: catalog.ErrInvalidInput, wantTries: 1},
		{name: "lease lost", errs: []error{catalog.ErrLeaseLost}, want: catalog.ErrLeaseLost, wantTries: 1},
		{name: "unknown", errs: []error{errors.New("boom"), errors.New("boom"), errors.New("boom"), errors.New("boom"), errors.New("boom"), errors.New("boom")},
			want: errWriteGivenUp, wantTries: unknownErrorTries},
		{name: "unknown once", errs: []error{errors.New("boom")}, wantTries: 2},
		{name: "canceled while unavailable", errs: []error{unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable, unavailable},
			cancel: 2, want: errWriteGivenUp, wantTries: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			a, cancel := newAttempt()
			tries := 0
			err := d.untilWritten(a, "finish", "record the outcome", nil, func() error {
				tries++
				if tries == tt.cancel {
					cancel(errRunCanceled)
				}
				if tries <= len(tt.errs) {
					return tt.errs[tries-1]
				}
				return nil
			})
			if tt.want == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tt.want)
			}
			require.Equal(t, tt.wantTries, tries)
		})
	}
}

func TestStorableMessage(t *testing.T) {
	t.Parallel()
	require.Equal(t, "a\uFFFDb\uFFFD", storableMessage("a\x00b\x00"))
	require.Equal(t, "plain", storableMessage("plain"))
}
