package catalog_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestPreparedSurvivesMigration: create-run and get-run go through statements
// prepared on the pool; a migration that changes the columns they return (while
// the server runs) must not break them: the stale statement is prepared again.
func TestPreparedSurvivesMigration(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	for range 3 { // prepared on the first call, reused after
		run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
		require.NoError(t, err)
		got, err := s.RunGet(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, run.ID, got.ID)
	}

	// A column the statements return changes type: "cached plan must not change
	// result type" for a statement prepared before.
	_, err := s.DB().ExecContext(ctx, `ALTER TABLE runs ALTER COLUMN workflow TYPE varchar(200)`)
	require.NoError(t, err)
	for range 3 {
		run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
		require.NoError(t, err)
		require.Equal(t, "wf", run.Workflow)
		got, err := s.RunGet(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, run.ID, got.ID)
	}
}
