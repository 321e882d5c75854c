package migrations_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/migrations"
)

// landedFile lists every landed migration with its SHA-256, in sha256sum's format.
// A migration lands with its line: `(cd migrations && sha256sum NNNNN_name.sql >>
// landed.sha256)`. From then on it is never edited; a change is a new file.
const landedFile = "landed.sha256"

// TestLandedMigrationsUnchanged fails when a landed migration was edited, removed,
// or a new one has no line in landed.sha256 yet.
func TestLandedMigrationsUnchanged(t *testing.T) {
	t.Parallel()
	list, err := migrations.FS.Open(landedFile)
	require.NoError(t, err)
	defer list.Close()
	landed := map[string]string{}
	sc := bufio.NewScanner(list)
	for sc.Scan() {
		sum, name, ok := strings.Cut(sc.Text(), "  ")
		require.True(t, ok, "bad line in %s: %q", landedFile, sc.Text())
		landed[name] = sum
	}
	require.NoError(t, sc.Err())

	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, name := range files {
		b, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		sum := sha256.Sum256(b)
		want, ok := landed[name]
		require.True(t, ok, "%s has no line in migrations/%s: add it when it lands (see landedFile)", name, landedFile)
		require.Equal(t, want, hex.EncodeToString(sum[:]), "%s was edited after it landed: write a new migration instead", name)
		delete(landed, name)
	}
	require.Empty(t, landed, "landed migrations were removed")
}

// TestMigrationsUpDownUp applies the migrations one at a time to an empty database,
// noting the schema after each, then rolls them back one at a time: after each Down
// the schema must be the one noted at that version (tables, sequences, and
// functions with their result types and bodies). Then all of them go up again.
func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	c := testenv.PG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateDatabase(ctx, "updownup", ""))
	db, err := sql.Open("postgres", c.URL("updownup"))
	require.NoError(t, err)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)

	objects := func() []string {
		rows, err := db.QueryContext(ctx, `
SELECT 'table ' || tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'
UNION ALL SELECT 'function ' || p.oid::regprocedure::text || ' returns ' || pg_get_function_result(p.oid) || ' body ' || md5(p.prosrc)
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = 'public'
UNION ALL SELECT 'sequence ' || sequencename FROM pg_sequences WHERE schemaname = 'public' AND sequencename <> 'goose_db_version_id_seq'
ORDER BY 1`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		return out
	}

	sources := provider.ListSources()
	require.NotEmpty(t, sources)
	at := map[int64][]string{0: objects()}
	for _, src := range sources {
		_, err := provider.UpTo(ctx, src.Version)
		require.NoError(t, err, "up to %d", src.Version)
		at[src.Version] = objects()
	}
	top := at[sources[len(sources)-1].Version]
	for i := len(sources) - 1; i >= 0; i-- {
		below := int64(0)
		if i > 0 {
			below = sources[i-1].Version
		}
		_, err := provider.DownTo(ctx, below)
		require.NoError(t, err, "down from %d", sources[i].Version)
		require.Equal(t, at[below], objects(), "the Down of %s does not restore the schema of version %d", filepath.Base(sources[i].Path), below)
	}
	require.Empty(t, objects(), "down left objects behind")
	_, err = provider.Up(ctx)
	require.NoError(t, err, "up again")
	require.Equal(t, top, objects(), "up after down made another schema")
}

// TestAliasesBackfillLatest: migration 00007 gives every existing workflow the alias
// latest at its newest version, so that runs started without a version go on
// starting there.
func TestAliasesBackfillLatest(t *testing.T) {
	t.Parallel()
	c := testenv.PG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateDatabase(ctx, "backfill", ""))
	db, err := sql.Open("postgres", c.URL("backfill"))
	require.NoError(t, err)
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, 6)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `
INSERT INTO workflows (name, latest_version) VALUES ('wf', 2), ('empty', 0);
INSERT INTO bundles (digest, size, blob_key) VALUES
    ('sha256:' || repeat('1', 64), 1, 'k1'), ('sha256:' || repeat('2', 64), 1, 'k2');
INSERT INTO workflow_versions (workflow, version, bundle_digest, definition, fingerprint) VALUES
    ('wf', 1, 'sha256:' || repeat('1', 64), '{}', 'sha256:' || repeat('1', 64)),
    ('wf', 2, 'sha256:' || repeat('2', 64), '{}', 'sha256:' || repeat('2', 64));`)
	require.NoError(t, err)
	_, err = provider.UpTo(ctx, 7)
	require.NoError(t, err)

	var aliases []string
	rows, err := db.QueryContext(ctx, `SELECT workflow || ' ' || alias || ' ' || version || ' ' || updated_by FROM workflow_aliases ORDER BY 1`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		aliases = append(aliases, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"wf latest 2 migration"}, aliases)
	var kind string
	require.NoError(t, db.QueryRowContext(ctx, `SELECT kind FROM alias_changes WHERE workflow = 'wf'`).Scan(&kind))
	require.Equal(t, "deploy", kind)
}
