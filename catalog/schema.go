package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/lib/pq"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/cairnrun/cairn/migrations"
)

// Schema errors returned by CheckSchema; check with errors.Is.
var (
	// ErrSchemaBehind means migrations known to this binary are not applied yet.
	ErrSchemaBehind = errors.New("database schema is behind this binary: run `cairn migrate up`")
	// ErrSchemaAhead means the database has migrations this binary does not know:
	// it was migrated by a newer Cairn.
	ErrSchemaAhead = errors.New("database schema is ahead of this binary (unknown migrations applied): upgrade cairn")
)

const gooseTable = "goose_db_version"

const sqlAppliedVersions = `
SELECT version_id FROM ` + gooseTable + `
WHERE is_applied AND version_id > 0
ORDER BY version_id`

// MigrationState describes one migration known to the binary or the database.
type MigrationState struct {
	// Version is the migration's number.
	Version int64 `json:"version"`
	// Name is the file name, empty for a migration the binary does not know.
	Name string `json:"name"`
	// Applied reports whether the database has it.
	Applied bool `json:"applied"`
	// AppliedAt is when it was applied, if known.
	AppliedAt *time.Time `json:"applied_at,omitempty"`
	// Unknown is true for a migration applied in the database but absent from
	// this binary.
	Unknown bool `json:"unknown"`
}

func newProvider(db *sql.DB, logger *slog.Logger) (*goose.Provider, error) {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return nil, fmt.Errorf("migration locker: %w", err)
	}
	opts := []goose.ProviderOption{goose.WithSessionLocker(locker), goose.WithDisableGlobalRegistry(true)}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	opts = append(opts, goose.WithSlog(logger))
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, opts...)
	if err != nil {
		return nil, fmt.Errorf("migration provider: %w", err)
	}
	return p, nil
}

// Migrate applies every pending migration under a session lock, so concurrent
// callers are safe. It refuses a database that is ahead of the binary. It returns the
// versions applied now; logger (nil: discard) gets goose's progress.
func (s *Store) Migrate(ctx context.Context, logger *slog.Logger) ([]int64, error) {
	return migrate(ctx, s.db.DB, logger, migrations.PhaseContract)
}

// MigratePhase is Migrate for one phase of a rolling upgrade (migrations/phase.go):
// PhaseExpand applies the pending migrations up to the first contract one, which
// the previous release's binaries run beside; PhaseContract applies them all.
func (s *Store) MigratePhase(ctx context.Context, logger *slog.Logger, phase migrations.Phase) ([]int64, error) {
	return migrate(ctx, s.db.DB, logger, phase)
}

// MigrationPlan lists the binary's migrations that the database has not applied,
// in order, each with its phase, locks and whether it runs online.
func (s *Store) MigrationPlan(ctx context.Context) ([]migrations.Info, error) {
	return pendingMigrations(ctx, s.db.DB)
}

// MigrationStatus lists the binary's migrations and whether each is applied, followed
// by migrations applied in the database that the binary does not know.
func (s *Store) MigrationStatus(ctx context.Context) ([]MigrationState, error) {
	return migrationStatus(ctx, s.db.DB)
}

// CheckSchema returns nil when the database has the binary's migrations (its
// contract ones may be pending) and, past them, none but expand migrations of a
// newer release (schema_phases says so: a
// rolling upgrade's expand phase, which this binary runs beside); ErrSchemaBehind
// when some of the binary's are missing, and ErrSchemaAhead when it has unknown
// ones of another phase, or of no recorded phase (wrapped with the versions
// involved, and the names of those it can).
func (s *Store) CheckSchema(ctx context.Context) error {
	return checkSchema(ctx, s.db.DB, true)
}

func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger, phase migrations.Phase) ([]int64, error) {
	// A database migrated by a newer binary, even by its expand phase alone, is
	// not this one's to migrate.
	if err := checkSchema(ctx, db, false); err != nil && !errors.Is(err, ErrSchemaBehind) {
		return nil, err
	}
	p, err := newProvider(db, logger)
	if err != nil {
		return nil, err
	}
	var results []*goose.MigrationResult
	if phase == migrations.PhaseExpand {
		pending, err := pendingMigrations(ctx, db)
		if err != nil {
			return nil, err
		}
		var upTo int64
		for _, m := range pending {
			if m.Phase != migrations.PhaseExpand {
				break
			}
			upTo = m.Version
		}
		if upTo > 0 {
			results, err = p.UpTo(ctx, upTo)
		}
	} else {
		results, err = p.Up(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	if err := recordPhases(ctx, db); err != nil {
		return nil, err
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// pendingMigrations lists the binary's migrations the database has not applied.
func pendingMigrations(ctx context.Context, db *sql.DB) ([]migrations.Info, error) {
	all, err := migrations.List()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return nil, err
	}
	isApplied := map[int64]bool{}
	for _, v := range applied {
		isApplied[v] = true
	}
	var out []migrations.Info
	for _, m := range all {
		if !isApplied[m.Version] {
			out = append(out, m)
		}
	}
	return out, nil
}

// sqlRecordPhase records a migration's phase once (schema_phases, migration 00057).
const sqlRecordPhase = `
INSERT INTO schema_phases (version, name, phase)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[])
ON CONFLICT (version) DO NOTHING`

// recordPhases writes the phase of every applied migration the binary knows to
// schema_phases, which older binaries read (checkSchema); nothing before the
// table exists.
func recordPhases(ctx context.Context, db *sql.DB) error {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('schema_phases') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("record migration phases: %w", translateError(err))
	}
	if !exists {
		return nil
	}
	all, err := migrations.List()
	if err != nil {
		return err
	}
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return err
	}
	isApplied := map[int64]bool{}
	for _, v := range applied {
		isApplied[v] = true
	}
	var versions []int64
	var names, phases []string
	for _, m := range all {
		if isApplied[m.Version] {
			versions, names, phases = append(versions, m.Version), append(names, m.Name), append(phases, string(m.Phase))
		}
	}
	if _, err := db.ExecContext(ctx, sqlRecordPhase, pq.Array(versions), pq.Array(names), pq.Array(phases)); err != nil {
		return fmt.Errorf("record migration phases: %w", translateError(err))
	}
	return nil
}

func migrationStatus(ctx context.Context, db *sql.DB) ([]MigrationState, error) {
	p, err := newProvider(db, nil)
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return nil, err
	}
	statuses, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	known := map[int64]bool{}
	var out []MigrationState
	for _, st := range statuses {
		known[st.Source.Version] = true
		ms := MigrationState{Version: st.Source.Version, Name: path.Base(st.Source.Path), Applied: st.State == goose.StateApplied}
		if ms.Applied && !st.AppliedAt.IsZero() {
			t := st.AppliedAt.UTC()
			ms.AppliedAt = &t
		}
		out = append(out, ms)
	}
	for _, v := range applied {
		if !known[v] {
			out = append(out, MigrationState{Version: v, Applied: true, Unknown: true})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// checkSchema is CheckSchema; without allowExpand any unknown migration is
// ErrSchemaAhead.
func checkSchema(ctx context.Context, db *sql.DB, allowExpand bool) error {
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return err
	}
	known, err := knownVersions()
	if err != nil {
		return err
	}
	isApplied := map[int64]bool{}
	var unknown []int64
	for _, v := range applied {
		isApplied[v] = true
		if _, ok := known[v]; !ok {
			unknown = append(unknown, v)
		}
	}
	if len(unknown) > 0 {
		if err := aheadByExpand(ctx, db, unknown, allowExpand); err != nil {
			return err
		}
	}
	// The binary's own contract migrations may wait: it runs before its
	// release's contract phase as after it (a rolling upgrade applies that phase
	// once no server of the previous release is left; docs/operations.md).
	var missing []int64
	for v, phase := range known {
		if !isApplied[v] && (phase != migrations.PhaseContract || !allowExpand) {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		return fmt.Errorf("%w: pending versions %v", ErrSchemaBehind, missing)
	}
	return nil
}

// sqlPhases reads the recorded phases of migrations (schema_phases).
const sqlPhases = `SELECT version, name, phase FROM schema_phases WHERE version = ANY($1::bigint[]) ORDER BY version`

// aheadByExpand returns nil when every migration of unknown (applied, unknown to
// the binary) is an expand one by schema_phases and allowExpand is set, and
// ErrSchemaAhead naming the first that is not otherwise.
func aheadByExpand(ctx context.Context, db *sql.DB, unknown []int64, allowExpand bool) error {
	phases := map[int64][2]string{}
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass('schema_phases') IS NOT NULL`).Scan(&exists); err != nil {
		return fmt.Errorf("read schema version: %w", translateError(err))
	}
	if exists {
		rows, err := db.QueryContext(ctx, sqlPhases, pq.Array(unknown))
		if err != nil {
			return fmt.Errorf("read schema version: %w", translateError(err))
		}
		defer rows.Close()
		for rows.Next() {
			var v int64
			var name, phase string
			if err := rows.Scan(&v, &name, &phase); err != nil {
				return fmt.Errorf("read schema version: %w", err)
			}
			phases[v] = [2]string{name, phase}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read schema version: %w", translateError(err))
		}
	}
	for _, v := range unknown {
		p, ok := phases[v]
		switch {
		case !ok:
			return fmt.Errorf("%w: version %d (its phase is not recorded)", ErrSchemaAhead, v)
		case p[1] != string(migrations.PhaseExpand):
			return fmt.Errorf("%w: %s, a %s migration (this binary runs beside expand migrations only)", ErrSchemaAhead, p[0], p[1])
		case !allowExpand:
			return fmt.Errorf("%w: %s (an expand migration of a newer release)", ErrSchemaAhead, p[0])
		}
	}
	return nil
}

func appliedVersions(ctx context.Context, db *sql.DB) ([]int64, error) {
	var exists bool
	if err := db.QueryRowContext(ctx, `SELECT to_regclass($1) IS NOT NULL`, gooseTable).Scan(&exists); err != nil {
		return nil, fmt.Errorf("read schema version: %w", translateError(err))
	}
	if !exists {
		return nil, nil
	}
	rows, err := db.QueryContext(ctx, sqlAppliedVersions)
	if err != nil {
		return nil, fmt.Errorf("read schema version: %w", translateError(err))
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read schema version: %w", err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read schema version: %w", translateError(err))
	}
	return out, nil
}

// knownVersions lists the binary's migrations, each with its phase. They are
// embedded, so they are read once: /readyz checks the schema on every probe.
var knownVersions = sync.OnceValues(func() (map[int64]migrations.Phase, error) {
	list, err := migrations.List()
	if err != nil {
		return nil, fmt.Errorf("migration sources: %w", err)
	}
	out := make(map[int64]migrations.Phase, len(list))
	for _, m := range list {
		out[m.Version] = m.Phase
	}
	return out, nil
})
