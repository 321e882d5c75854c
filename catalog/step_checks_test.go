package catalog_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestStepChecksHold: the checks of steps that are triggers, not CHECK constraints
// (catalog/sql/triggers.sql: steps_checks for an update, steps_checks_inserted
// for an insert) refuse a bad row, on insert and on an update of
// one of their columns, and leave the hot path's updates (claim, finish) alone.
func TestStepChecksHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	s := catalog.New(db, nil)
	run := newRun(t, ctx, s, diamond(3))

	checkViolation := func(t *testing.T, err error) {
		t.Helper()
		require.Equal(t, "steps_checks", refusedWith(t, err, "23514").Constraint)
	}
	for name, stmt := range map[string]string{
		"priority above 9":       `UPDATE steps SET priority = 10 WHERE run_id = $1 AND key = 'a'`,
		"no attempt at all":      `UPDATE steps SET max_attempts = 0 WHERE run_id = $1 AND key = 'b'`,
		"a key the API refuses":  `UPDATE steps SET key = 'B!' WHERE run_id = $1 AND key = 'b'`,
		"half a concurrency key": `UPDATE steps SET conc_name = 'n' WHERE run_id = $1 AND key = 'c'`,
		"an unknown trigger rule": `INSERT INTO steps (run_id, key, status, needs, max_attempts, deps_remaining, trigger_rule)
		                           VALUES ($1, 'e', 'waiting', '{}', 1, 0, 'sometimes')`,
		"a map instance named apart": `UPDATE steps SET map_parent = 'a', map_index = 2 WHERE run_id = $1 AND key = 'd'`,
		// An insert is checked once for all its rows (steps_checks_inserted): the bad one
		// of three is found, and none is inserted.
		"one bad row of three": `INSERT INTO steps (run_id, key, status, needs, max_attempts, deps_remaining, priority)
		                         VALUES ($1, 'e', 'waiting', '{}', 1, 0, 5), ($1, 'f', 'waiting', '{}', 0, 0, 5),
		                                ($1, 'g', 'waiting', '{}', 1, 0, 5)`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := db.ExecContext(ctx, stmt, run.ID)
			checkViolation(t, err)
		})
	}

	var n int
	require.NoError(t, db.GetContext(ctx, &n, `SELECT count(*) FROM steps WHERE run_id = $1`, run.ID))
	require.Equal(t, 4, n, "no row of a refused insert is left")

	// The same columns with good values pass, and the run goes on.
	_, err := db.ExecContext(ctx, `UPDATE steps SET priority = 9, max_attempts = 2 WHERE run_id = $1 AND key = 'a'`, run.ID)
	require.NoError(t, err)
	claimed := claimKeys(t, ctx, s, "d1", 1)
	a := claimed["a"]
	_, err = s.StepFinishBatch(ctx, []*catalog.StepFinishParams{{
		RunID: run.ID, Key: "a", LeaseToken: a.LeaseToken, Outcome: catalog.OutcomeSucceeded,
	}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"a": "succeeded", "b": "ready", "c": "ready", "d": "waiting"}, statuses(t, ctx, s, run.ID))
}

// refusedWith requires err to be PostgreSQL's refusal with SQLSTATE code, and
// returns it.
func refusedWith(t *testing.T, err error, code pq.ErrorCode) *pq.Error {
	t.Helper()
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "want a refusal %s, got %v", code, err)
	require.Equal(t, code, pqErr.Code, pqErr.Message)
	return pqErr
}

// TestVersionsKept: a run does not check its version with a
// foreign key; the rule it kept holds otherwise. A run is created only for a
// version that exists, and a version that runs name can be neither deleted nor
// renumbered (workflow_versions_kept), so every run's version can be read.
func TestVersionsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	s := catalog.New(db, nil)
	run := newRun(t, ctx, s, diamond(1))

	_, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: run.Version + 1})
	require.ErrorIs(t, err, catalog.ErrNotFound, "no run of a version that does not exist")
	_, _, err = s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "nope", Version: 1})
	require.ErrorIs(t, err, catalog.ErrNotFound, "nor of a workflow that does not exist")

	for name, stmt := range map[string]string{
		"delete":    `DELETE FROM workflow_versions WHERE workflow = 'wf'`,
		"renumber":  `UPDATE workflow_versions SET version = version + 10 WHERE workflow = 'wf'`,
		"truncate":  `TRUNCATE workflow_versions CASCADE`,
		"move away": `UPDATE workflow_versions SET workflow = workflow WHERE workflow = 'wf'`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := db.ExecContext(ctx, stmt)
			refusedWith(t, err, "23001")
		})
	}

	var n int
	require.NoError(t, db.GetContext(ctx, &n, `
SELECT count(*) FROM runs r JOIN workflow_versions v ON v.workflow = r.workflow AND v.version = r.version
WHERE r.id = $1`, run.ID))
	require.Equal(t, 1, n, "the run's version is still there")
	got, err := s.RunGet(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, run.Version, got.Version)

	// The other columns of a version are not the trigger's business.
	_, err = db.ExecContext(ctx, `UPDATE workflow_versions SET created_at = created_at WHERE workflow = 'wf'`)
	require.NoError(t, err)
}
