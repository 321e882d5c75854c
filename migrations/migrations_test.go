package migrations_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	_ "github.com/lib/pq"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/migrations"
	"github.com/cairnrun/cairn/migrations/snapshot"
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
// the schema must be the one noted at that version (tables, sequences, and the
// whole definition of every function and trigger). Then all of them go up again.
// The migrations are the landed ones and two that the generator writes from
// catalog/sql changed on purpose (withGeneratedMigrations): their Down sections
// must restore the previous definitions too.
func TestMigrationsUpDownUp(t *testing.T) {
	t.Parallel()
	c := testenv.PG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, c.CreateDatabase(ctx, "updownup", ""))
	db, err := sql.Open("postgres", c.URL("updownup"))
	require.NoError(t, err)
	defer db.Close()
	fsys, probes := withGeneratedMigrations(t)
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)

	// objects names the tables and sequences, and every function and trigger
	// with a digest of its whole definition (sqlDefinitions).
	objects := func() []string {
		rows, err := db.QueryContext(ctx, `
SELECT 'table ' || tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'goose_db_version'
UNION ALL SELECT 'sequence ' || sequencename FROM pg_sequences WHERE schemaname = 'public' AND sequencename <> 'goose_db_version_id_seq'`)
		require.NoError(t, err)
		defer rows.Close()
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		require.NoError(t, rows.Err())
		for name, def := range sqlDefinitions(ctx, t, db) {
			sum := sha256.Sum256([]byte(def))
			out = append(out, name+" "+hex.EncodeToString(sum[:8]))
		}
		sort.Strings(out)
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

	// The generated migrations did what catalog/sql says.
	var changed, trigger, widened string
	var gone bool
	require.NoError(t, db.QueryRowContext(ctx, `
SELECT (SELECT prosrc FROM pg_proc WHERE oid = $1::regprocedure),
       (SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgname = 'events_probe'),
       (SELECT pg_get_function_result('cairn_probe_widen(integer)'::regprocedure)),
       (SELECT to_regprocedure('cairn_probe_gone(integer)') IS NULL)`, probes.changed).
		Scan(&changed, &trigger, &widened, &gone))
	require.Contains(t, changed, probes.marker, "the changed body of %s", probes.changed)
	require.Contains(t, trigger, "BEFORE TRUNCATE ON public.events")
	require.Equal(t, "bigint", widened)
	require.True(t, gone, "cairn_probe_gone was dropped from catalog/sql")
}

// generatedProbes names what withGeneratedMigrations changed.
type generatedProbes struct {
	changed string // the function whose body the first migration changes
	marker  string // the line it adds to that body
}

// withGeneratedMigrations is migrations.FS with two more migrations, written by
// migrations/snapshot (as `go run ./migrations/gen NAME` writes them) from
// catalog/sql changed on purpose. The first changes the body of the snapshot's
// first function and adds three functions and a trigger; the second changes that
// trigger (AFTER to BEFORE), one new function's result type (integer to bigint,
// which CREATE OR REPLACE cannot do alone), and drops another.
func withGeneratedMigrations(t *testing.T) (fs.FS, generatedProbes) {
	t.Helper()
	sqlFS, err := fs.Sub(catalog.SQLFiles, "sql")
	require.NoError(t, err)
	base, err := snapshot.Read(sqlFS)
	require.NoError(t, err)

	probes := generatedProbes{marker: "-- changed by TestMigrationsUpDownUp"}
	first := slices.Clone(base)
	bodyStart := regexp.MustCompile(`(?s)\bAS\s+\$[A-Za-z_]*\$`)
	for i, o := range first {
		if o.Kind != snapshot.Function {
			continue
		}
		at := bodyStart.FindStringIndex(o.SQL)
		require.NotNil(t, at, "no body in %s", o.Key)
		o.SQL = o.SQL[:at[1]] + "\n" + probes.marker + o.SQL[at[1]:]
		first[i], probes.changed = o, o.Key
		break
	}
	probe := func(text string) snapshot.Snapshot {
		objs, err := snapshot.Parse("probe.sql", text)
		require.NoError(t, err)
		return objs
	}
	first = append(first, probe(`
CREATE OR REPLACE FUNCTION cairn_probe_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION cairn_probe_gone(p_n integer) RETURNS integer LANGUAGE sql AS $$ SELECT p_n $$;
CREATE OR REPLACE FUNCTION cairn_probe_widen(p_n integer) RETURNS integer LANGUAGE sql AS $$ SELECT p_n $$;
CREATE OR REPLACE TRIGGER events_probe AFTER TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION cairn_probe_trigger();`)...)
	second := append(slices.Clone(first[:len(base)]), probe(`
CREATE OR REPLACE FUNCTION cairn_probe_trigger() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE OR REPLACE FUNCTION cairn_probe_widen(p_n integer) RETURNS bigint LANGUAGE sql AS $$ SELECT p_n::bigint $$;
CREATE OR REPLACE TRIGGER events_probe BEFORE TRUNCATE ON events FOR EACH STATEMENT EXECUTE FUNCTION cairn_probe_trigger();`)...)

	fsys := fstest.MapFS{}
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, name := range names {
		b, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		fsys[name] = &fstest.MapFile{Data: b}
	}
	last, err := strconv.Atoi(strings.SplitN(names[len(names)-1], "_", 2)[0])
	require.NoError(t, err)
	for i, step := range [][2]snapshot.Snapshot{{base, first}, {first, second}} {
		text, changed := snapshot.Migration(step[0], step[1], "TestMigrationsUpDownUp")
		require.NotEmpty(t, changed)
		require.Contains(t, text, "Code generated by TestMigrationsUpDownUp from catalog/sql; DO NOT EDIT.")
		fsys[fmt.Sprintf("%05d_generated_%d.sql", last+1+i, i+1)] = &fstest.MapFile{Data: []byte(text)}
	}
	return fsys, probes
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
