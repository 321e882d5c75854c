package migrations_test

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/migrations"
)

// sqlDefinitions is every function and trigger of the public schema by name:
// "function cairn_sweep_next(p_grace interval)" → pg_get_functiondef, "trigger
// runs_child_ended ON runs" → pg_get_triggerdef. Triggers PostgreSQL makes for
// foreign keys are left out.
func sqlDefinitions(ctx context.Context, t *testing.T, db *sql.DB) map[string]string {
	t.Helper()
	rows, err := db.QueryContext(ctx, `
SELECT 'function ' || p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')', pg_get_functiondef(p.oid)
  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
 WHERE n.nspname = 'public'
UNION ALL
SELECT 'trigger ' || t.tgname || ' ON ' || c.relname, pg_get_triggerdef(t.oid)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND NOT t.tgisinternal`)
	require.NoError(t, err)
	defer rows.Close()
	defs := map[string]string{}
	for rows.Next() {
		var name, def string
		require.NoError(t, rows.Scan(&name, &def))
		defs[name] = def
	}
	require.NoError(t, rows.Err())
	return defs
}

// requireSameDefinitions fails, naming each function or trigger, when want and got
// differ: defined on one side only, or defined otherwise (with a diff).
func requireSameDefinitions(t *testing.T, wantName string, want map[string]string, gotName string, got map[string]string) {
	t.Helper()
	var names []string
	for name := range want {
		names = append(names, name)
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		w, inWant := want[name]
		g, inGot := got[name]
		switch {
		case !inGot:
			t.Errorf("%s is only in %s", name, wantName)
		case !inWant:
			t.Errorf("%s is only in %s", name, gotName)
		case w != g:
			t.Errorf("%s differs (- %s, + %s):\n%s", name, wantName, gotName, firstDifference(w, g))
		}
	}
	require.False(t, t.Failed(), "%s and %s define other functions or triggers", wantName, gotName)
}

// applySnapshot runs every file of a snapshot (catalog/sql's layout) on db, in the
// order of their names, without checking function bodies while it does (as
// pg_dump's output does): a function of one file may call one of a later file.
func applySnapshot(ctx context.Context, t *testing.T, db *sql.DB, fsys fs.FS) {
	t.Helper()
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET check_function_bodies = off`)
	require.NoError(t, err)
	names, err := fs.Glob(fsys, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, string(b))
		require.NoError(t, err, "apply catalog/sql/%s", name)
	}
	_, err = conn.ExecContext(ctx, `RESET check_function_bodies`)
	require.NoError(t, err)
}

// TestSnapshotMatchesMigrations holds catalog/sql, the current definition of every
// function and trigger, to what the migrations make: a scratch database with the
// schema's tables but none of its functions and triggers gets the snapshot, and
// every function's pg_get_functiondef and every trigger's pg_get_triggerdef must
// equal the migrated database's, with nothing defined on one side only. When it
// fails, a snapshot file was edited without a migration (go run ./migrations/gen
// NAME writes it), or a migration was written by hand without the snapshot.
func TestSnapshotMatchesMigrations(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	migrated := testenv.DB(t).DB
	scratch := testenv.DB(t).DB

	// The scratch database's functions move to a schema of their own (an index
	// or statistics that use one follows it there) and its triggers go, so that
	// public's functions and triggers are the snapshot's alone.
	_, err := scratch.ExecContext(ctx, `
CREATE SCHEMA migrated;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT t.tgname, t.tgrelid::regclass AS tab FROM pg_trigger t
               JOIN pg_class c ON c.oid = t.tgrelid JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'public' AND NOT t.tgisinternal LOOP
        EXECUTE format('DROP TRIGGER %I ON %s', r.tgname, r.tab);
    END LOOP;
    FOR r IN SELECT p.oid::regprocedure AS f FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
              WHERE n.nspname = 'public' LOOP
        EXECUTE format('ALTER FUNCTION %s SET SCHEMA migrated', r.f);
    END LOOP;
END $$;`)
	require.NoError(t, err)
	require.Empty(t, sqlDefinitions(ctx, t, scratch), "the scratch database kept functions or triggers")

	snap, err := fs.Sub(catalog.SQLFiles, "sql")
	require.NoError(t, err)
	applySnapshot(ctx, t, scratch, snap)
	requireSameDefinitions(t, "the migrated database", sqlDefinitions(ctx, t, migrated),
		"catalog/sql", sqlDefinitions(ctx, t, scratch))
}

// firstDifference shows where texts a and b part: the line numbers, a few lines
// before it, and the next lines of each from there (- a, + b).
func firstDifference(a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	i := 0
	for i < len(x) && i < len(y) && x[i] == y[i] {
		i++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "from line %d:\n", i+1)
	for _, l := range x[max(i-2, 0):i] {
		fmt.Fprintf(&out, "  %s\n", l)
	}
	for _, l := range x[i:min(i+4, len(x))] {
		fmt.Fprintf(&out, "- %s\n", l)
	}
	for _, l := range y[i:min(i+4, len(y))] {
		fmt.Fprintf(&out, "+ %s\n", l)
	}
	return out.String()
}

// lastHandWritten is the last migration whose function and trigger bodies were
// written by hand (00042 to 00050 were written beside catalog/sql, on branches
// that began before it). Every later one that (re)defines a function or a trigger
// is written by migrations/gen.
const lastHandWritten = 50

// TestDefinitionsAreGenerated: a migration after lastHandWritten that creates a
// function or a trigger is marked generated, so the reviewed text of every
// definition is catalog/sql and no migration repeats a body by hand.
func TestDefinitionsAreGenerated(t *testing.T) {
	t.Parallel()
	creates := regexp.MustCompile(`(?im)^\s*CREATE\s+(OR\s+REPLACE\s+)?(CONSTRAINT\s+)?(FUNCTION|TRIGGER)\b`)
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	for _, name := range names {
		number, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		require.NoError(t, err, name)
		if number <= lastHandWritten {
			continue
		}
		b, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		if creates.Match(b) {
			require.True(t, strings.Contains(string(b), "Code generated by"), "%s defines a function or a trigger by hand: edit catalog/sql and run go run ./migrations/gen NAME", name)
		}
	}
}
