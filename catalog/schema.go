package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

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
	return migrate(ctx, s.db.DB, logger)
}

// MigrationStatus lists the binary's migrations and whether each is applied, followed
// by migrations applied in the database that the binary does not know.
func (s *Store) MigrationStatus(ctx context.Context) ([]MigrationState, error) {
	return migrationStatus(ctx, s.db.DB)
}

// CheckSchema returns nil when the database has exactly the binary's migrations,
// ErrSchemaBehind when some are missing and ErrSchemaAhead when it has unknown ones
// (wrapped with the versions involved).
func (s *Store) CheckSchema(ctx context.Context) error {
	return checkSchema(ctx, s.db.DB)
}

func migrate(ctx context.Context, db *sql.DB, logger *slog.Logger) ([]int64, error) {
	if err := checkSchema(ctx, db); err != nil && !errors.Is(err, ErrSchemaBehind) {
		return nil, err
	}
	p, err := newProvider(db, logger)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply migrations: %w", err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
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

func checkSchema(ctx context.Context, db *sql.DB) error {
	applied, err := appliedVersions(ctx, db)
	if err != nil {
		return err
	}
	known, err := knownVersions()
	if err != nil {
		return err
	}
	isApplied := map[int64]bool{}
	for _, v := range applied {
		isApplied[v] = true
		if !known[v] {
			return fmt.Errorf("%w: version %d", ErrSchemaAhead, v)
		}
	}
	var missing []int64
	for v := range known {
		if !isApplied[v] {
			missing = append(missing, v)
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		return fmt.Errorf("%w: pending versions %v", ErrSchemaBehind, missing)
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

// knownVersions lists the binary's migrations. They are embedded, so they are read
// once: /readyz checks the schema on every probe.
var knownVersions = sync.OnceValues(func() (map[int64]bool, error) {
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migration sources: %w", err)
	}
	out := map[int64]bool{}
	for _, name := range names {
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.ParseInt(num, 10, 64)
		if !ok || err != nil {
			return nil, fmt.Errorf("migration %s: no version number", name)
		}
		out[v] = true
	}
	return out, nil
})
