package catalog_test

import (
	"slices"
	"testing"

	"github.com/pressly/goose/v3"
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
// migrations (from the last expand one before its newest contract one, 00099, to
// the end), the plan lists them with what they declare; MigratePhase(expand)
// applies those before the first contract one and records the phase of every
// applied migration (schema_phases); the binary serves the schema with contract
// migrations pending when nothing but contract migrations is (a rolling upgrade's
// servers of the new release start before its contract phase), and refuses it
// while an expand migration after them is; it writes large payloads at their
// content address until migration 00099, a contract one, is applied
// (catalog.Store.BlobIndex).
func TestMigratePhases(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	all, err := migrations.List()
	require.NoError(t, err)
	lastContract := len(all) - 1
	for all[lastContract].Phase != migrations.PhaseContract {
		lastContract--
	}
	require.Equal(t, int64(99), all[lastContract].Version, "the newest contract migration")
	first := lastContract
	for all[first].Phase != migrations.PhaseExpand {
		first--
	}
	rolled := all[first:]
	expandAfter := slices.ContainsFunc(all[lastContract:], func(m migrations.Info) bool { return m.Phase == migrations.PhaseExpand })
	// Undo them, newest first, with their Down sections (goose: statement by
	// statement as each declares, a NO TRANSACTION one outside a transaction).
	p, err := goose.NewProvider(goose.DialectPostgres, s.DB().DB, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = p.DownTo(ctx, rolled[0].Version-1)
	require.NoError(t, err)
	require.ErrorIs(t, s.CheckSchema(ctx), catalog.ErrSchemaBehind)

	plan, err := s.MigrationPlan(ctx)
	require.NoError(t, err)
	require.Len(t, plan, len(rolled))
	for i, m := range rolled {
		require.Equal(t, m.Name, plan[i].Name)
		require.True(t, plan[i].Declared)
		require.NotEmpty(t, plan[i].Locks)
	}

	applied, err := s.MigratePhase(ctx, nil, migrations.PhaseExpand)
	require.NoError(t, err)
	require.Equal(t, []int64{rolled[0].Version}, applied)
	if expandAfter {
		require.ErrorIs(t, s.CheckSchema(ctx), catalog.ErrSchemaBehind, "expand migrations pending after the contract ones")
	} else {
		require.NoError(t, s.CheckSchema(ctx), "its own contract migrations pending")
	}
	require.Nil(t, s.BlobIndex(ctx), "before the contract phase, large payloads go to their content address")
	var recorded int
	require.NoError(t, s.DB().GetContext(ctx, &recorded, `SELECT count(*) FROM schema_phases`))
	require.Equal(t, first+1, recorded)

	_, err = s.Migrate(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, s.CheckSchema(ctx))
	// A server started after the contract phase (the one above looks again
	// within ownKeysRecheck).
	require.NotNil(t, catalog.New(s.DB(), nil).BlobIndex(ctx), "after it, under keys of their own")
}
