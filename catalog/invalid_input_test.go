package catalog_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestInvalidInputTranslated: values PostgreSQL refuses (text with NUL or invalid
// UTF-8, a JSON \u0000 or unpaired surrogate, an integer beyond its column) come
// back as ErrInvalidInput, which the API answers with a 400, not a 500.
func TestInvalidInputTranslated(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run := newRun(t, ctx, s, []catalog.NewStep{{Key: "a", MaxAttempts: 1}})
	create := func(p catalog.RunCreateParams) error {
		p.Workflow = "wf"
		_, _, err := s.RunCreate(ctx, &p)
		return err
	}
	tests := []struct {
		name string
		err  error
	}{
		{name: "jsonb \\u0000", err: create(catalog.RunCreateParams{Version: v.Version, Input: json.RawMessage(`"\u0000"`)})},
		{name: "jsonb invalid UTF-8", err: create(catalog.RunCreateParams{Version: v.Version, Input: json.RawMessage("\"\xff\"")})},
		{name: "jsonb unpaired surrogate", err: create(catalog.RunCreateParams{Version: v.Version, Input: json.RawMessage(`"\ud800"`)})},
		{name: "integer out of range", err: create(catalog.RunCreateParams{Version: 1 << 40})},
		{name: "idempotency key with 0xFF", err: create(catalog.RunCreateParams{Version: v.Version, IdempotencyKey: "a\xffb", IdempotencyScope: "s", RequestHash: "h"})},
		{name: "text NUL in a transaction", err: s.RunCancel(ctx, run.ID, "a\x00b")},
		{name: "version out of range", err: func() error { _, err := s.VersionGet(ctx, "wf", 1<<31); return err }()},
		{name: "filter with NUL", err: func() error {
			_, err := s.RunList(ctx, &catalog.RunListParams{Workflow: "\x00", Limit: 1})
			return err
		}()},
	}
	for _, tt := range tests {
		require.ErrorIs(t, tt.err, catalog.ErrInvalidInput, tt.name)
		require.NotErrorIs(t, tt.err, catalog.ErrUnavailable, tt.name)
	}
	// Nothing was written: the run is not canceled, no other run exists.
	got, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, catalog.RunPending, got.Status)
	runs, err := s.RunList(ctx, &catalog.RunListParams{Limit: 10})
	require.NoError(t, err)
	require.Len(t, runs, 1)
}
