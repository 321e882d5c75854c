package snapshot_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/migrations/snapshot"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, text string
		keys       []string
		err        string
	}{
		{
			name: "a function is known by its input types, OUT and DEFAULT aside",
			text: "-- comment; with a ';'\nCREATE OR REPLACE FUNCTION cairn_x(p_a timestamptz, OUT o text, p_b text DEFAULT ';', VARIADIC p_c int[])\nRETURNS text LANGUAGE sql AS $$ SELECT ';' $$;",
			keys: []string{"cairn_x(timestamptz, text, int[])"},
		},
		{
			name: "dollar-quoted bodies with a tag, quotes and comments hold semicolons",
			text: "CREATE OR REPLACE FUNCTION f() RETURNS void LANGUAGE plpgsql AS $body$ BEGIN /* ; */ PERFORM 'a;''b'; -- ;\nEND $body$;\n\nCREATE OR REPLACE TRIGGER t_x AFTER INSERT ON steps FOR EACH ROW WHEN (NEW.key <> ';') EXECUTE FUNCTION f();",
			keys: []string{"f()", "t_x ON steps"},
		},
		{
			name: "anything else is refused",
			text: "CREATE TABLE x (a int);",
			err:  "not a CREATE OR REPLACE FUNCTION or TRIGGER",
		},
		{
			name: "an unended body is refused",
			text: "CREATE OR REPLACE FUNCTION f() RETURNS void LANGUAGE sql AS $$ SELECT 1;",
			err:  "does not end",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			objs, err := snapshot.Parse("x.sql", tt.text)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			var keys []string
			for _, o := range objs {
				keys = append(keys, o.Key)
			}
			require.Equal(t, tt.keys, keys)
		})
	}
}

func TestMigrationOfNothing(t *testing.T) {
	t.Parallel()
	snap, err := snapshot.Parse("x.sql", "CREATE OR REPLACE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$;")
	require.NoError(t, err)
	text, changed := snapshot.Migration(snap, snap, "test")
	require.Empty(t, changed)
	require.Empty(t, text)
}

func TestMigrationDropsBeforeAResultChange(t *testing.T) {
	t.Parallel()
	prev, err := snapshot.Parse("x.sql", "CREATE OR REPLACE FUNCTION f(p_a int) RETURNS int LANGUAGE sql AS $$ SELECT p_a $$;")
	require.NoError(t, err)
	next, err := snapshot.Parse("x.sql", "CREATE OR REPLACE FUNCTION f(p_a int, OUT o bigint) LANGUAGE sql AS $$ SELECT p_a::bigint $$;")
	require.NoError(t, err)
	text, changed := snapshot.Migration(prev, next, "test")
	require.Equal(t, []string{"f(int) (x.sql)"}, changed)
	up, down, ok := strings.Cut(text, "-- +goose Down")
	require.True(t, ok)
	require.Contains(t, up, "DROP FUNCTION f(int);\nCREATE OR REPLACE FUNCTION f(p_a int, OUT o bigint)")
	require.Contains(t, down, "DROP FUNCTION f(int);\nCREATE OR REPLACE FUNCTION f(p_a int) RETURNS int")

	// Another OUT parameter's type is another result type too.
	wider, err := snapshot.Parse("x.sql", "CREATE OR REPLACE FUNCTION f(p_a int, OUT o numeric) LANGUAGE sql AS $$ SELECT p_a::numeric $$;")
	require.NoError(t, err)
	text, _ = snapshot.Migration(next, wider, "test")
	require.Contains(t, text, "DROP FUNCTION f(int);\nCREATE OR REPLACE FUNCTION f(p_a int, OUT o numeric)")
}
