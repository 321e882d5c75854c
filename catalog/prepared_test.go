package catalog_test

import (
	"encoding/json"
	"testing"
	"time"

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

// TestClaimSurvivesMigration: a migration that changes a column the claim returns,
// beside prepared create-run statements, leaves claims and finishes working, and
// nothing is claimed twice or lost.
func TestClaimSurvivesMigration(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	claimAndFinish := func() {
		t.Helper()
		run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf"})
		require.NoError(t, err)
		claimed, err := s.StepClaim(ctx, "d1", 10, time.Minute)
		require.NoError(t, err)
		require.Len(t, claimed, 1)
		require.Equal(t, run.ID, claimed[0].RunID)
		require.Equal(t, "wf", claimed[0].Workflow)
		errs, err := s.StepFinishBatch(ctx, []*catalog.StepFinishParams{{
			RunID: run.ID, Key: "a", LeaseToken: claimed[0].LeaseToken, Outcome: catalog.OutcomeSucceeded,
			Output: json.RawMessage(`{"ok":true}`),
		}})
		require.NoError(t, err)
		require.NoError(t, errs[0])
		got, err := s.RunGet(ctx, run.ID)
		require.NoError(t, err)
		require.Equal(t, catalog.RunSucceeded, got.Status)
	}
	for range 3 {
		claimAndFinish()
	}
	// The claim returns runs.workflow; create-run's prepared statement too.
	_, err := s.DB().ExecContext(ctx, `ALTER TABLE runs ALTER COLUMN workflow TYPE varchar(200)`)
	require.NoError(t, err)
	for range 3 {
		claimAndFinish()
	}
}
