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

// TestVersionsKept: since migration 00035 a run does not check its version with a
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
			var pqErr *pq.Error
			require.True(t, errors.As(err, &pqErr), "want a refusal, got %v", err)
			require.Equal(t, pq.ErrorCode("23001"), pqErr.Code, pqErr.Message)
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
