package catalog_test

import (
	"io/fs"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/migrations"
)

// TestSchemaAheadByExpand: a rolling upgrade's expand phase (migrations/phase.go)
// applied by a newer binary leaves a schema this binary serves: CheckSchema
// accepts migrations it does not know when schema_phases records each as an
// expand one, and names the one that is not (a contract migration, or one whose
// phase is not recorded). Migrate refuses both: the schema is not its own.
func TestSchemaAheadByExpand(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	_, err := s.DB().ExecContext(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99998, true), (99999, true)`)
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, catalog.ErrSchemaAhead)
	require.ErrorContains(t, err, "version 99998 (its phase is not recorded)")

	_, err = s.DB().ExecContext(ctx, `INSERT INTO schema_phases (version, name, phase)
VALUES (99998, '99998_add_x.sql', 'expand'), (99999, '99999_drop_y.sql', 'expand')`)
	require.NoError(t, err)
	require.NoError(t, s.CheckSchema(ctx), "expand migrations of a newer release")
	_, err = s.Migrate(ctx, nil)
	require.ErrorIs(t, err, catalog.ErrSchemaAhead)
	require.ErrorContains(t, err, "99998_add_x.sql")

	_, err = s.DB().ExecContext(ctx, `UPDATE schema_phases SET phase = 'contract' WHERE version = 99999`)
	require.NoError(t, err)
	err = s.CheckSchema(ctx)
	require.ErrorIs(t, err, catalog.ErrSchemaAhead)
	require.ErrorContains(t, err, "99999_drop_y.sql, a contract migration")
}

// TestMigratePhases: on a database that has not applied the binary's last
// migrations, the plan lists them with what they declare, and
// MigratePhase(expand) applies those before the first contract one and records
// the phase of every applied migration (schema_phases).
func TestMigratePhases(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	all, err := migrations.List()
	require.NoError(t, err)
	last := all[len(all)-1]
	require.Equal(t, migrations.PhaseExpand, last.Phase, "the newest migration (this test rolls it back)")
	_, err = s.DB().ExecContext(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, last.Version)
	require.NoError(t, err)
	// Undo what it did: its Down section, statement by statement (one of a NO
	// TRANSACTION migration may not run in a transaction block).
	text, err := fs.ReadFile(migrations.FS, last.Name)
	require.NoError(t, err)
	_, down, found := strings.Cut(string(text), "-- +goose Down")
	require.True(t, found, last.Name)
	for _, stmt := range strings.Split(down, ";") {
		if stmt = strings.TrimSpace(stmt); stmt != "" && !strings.HasPrefix(stmt, "--") {
			_, err = s.DB().ExecContext(ctx, stmt)
			require.NoError(t, err, stmt)
		}
	}
	require.ErrorIs(t, s.CheckSchema(ctx), catalog.ErrSchemaBehind)

	plan, err := s.MigrationPlan(ctx)
	require.NoError(t, err)
	require.Len(t, plan, 1)
	require.Equal(t, last.Name, plan[0].Name)
	require.True(t, plan[0].Declared)
	require.NotEmpty(t, plan[0].Locks)

	applied, err := s.MigratePhase(ctx, nil, migrations.PhaseExpand)
	require.NoError(t, err)
	require.Equal(t, []int64{last.Version}, applied)
	require.NoError(t, s.CheckSchema(ctx))
	var recorded int
	require.NoError(t, s.DB().GetContext(ctx, &recorded, `SELECT count(*) FROM schema_phases`))
	require.Equal(t, len(all), recorded)
}
