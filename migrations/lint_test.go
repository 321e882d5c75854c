package migrations_test

import (
	"io/fs"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/migrations"
)

// TestMigrationLint: every migration after those that landed before the headers
// declares its phase and locks (migrations/phase.go), and its Up keeps to them
// (migrations.Lint): no statement takes a stronger lock than declared, no index
// on a large table is built without CONCURRENTLY, no large table is rewritten,
// and an expand migration drops nothing.
func TestMigrationLint(t *testing.T) {
	t.Parallel()
	list, err := migrations.List()
	require.NoError(t, err)
	for _, m := range list {
		if m.Version <= migrations.LastUndeclared {
			continue
		}
		require.True(t, m.Declared, "%s declares no phase: add -- cairn-phase, -- cairn-locks and -- cairn-online above -- +goose Up", m.Name)
		text, err := fs.ReadFile(migrations.FS, m.Name)
		require.NoError(t, err)
		require.Empty(t, migrations.Lint(m, string(text)), m.Name)
	}
}

// TestMigrationLintFinds: the lint finds what it is for.
func TestMigrationLintFinds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		text  string
		wants string
	}{
		{"an index on steps without CONCURRENTLY", "-- cairn-phase: expand\n-- cairn-locks: SHARE on steps\n-- cairn-online: no\n-- +goose Up\nCREATE INDEX steps_x ON steps (key);\n-- +goose Down\nDROP INDEX steps_x;\n",
			"without CONCURRENTLY"},
		{"a lock stronger than declared", "-- cairn-phase: expand\n-- cairn-locks: none\n-- cairn-online: yes\n-- +goose Up\nALTER TABLE dispatchers ADD COLUMN x text;\n-- +goose Down\n",
			"takes ACCESS EXCLUSIVE"},
		{"a rewrite of a large table", "-- cairn-phase: expand\n-- cairn-locks: ACCESS EXCLUSIVE on runs\n-- cairn-online: no\n-- +goose Up\nALTER TABLE runs ALTER COLUMN workflow TYPE varchar(200);\n-- +goose Down\n",
			"rewrites runs"},
		{"a drop in an expand migration", "-- cairn-phase: expand\n-- cairn-locks: ACCESS EXCLUSIVE on runs\n-- cairn-online: yes\n-- +goose Up\nALTER TABLE runs DROP COLUMN deadline;\n-- +goose Down\n",
			"an expand migration removes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			info, err := migrations.Parse("00099_x.sql", []byte(tc.text))
			require.NoError(t, err)
			problems := migrations.Lint(info, tc.text)
			require.NotEmpty(t, problems)
			require.Contains(t, problems[0], tc.wants)
		})
	}
	_, err := migrations.Parse("00099_x.sql", []byte("-- +goose Up\nSELECT 1;\n"))
	require.ErrorContains(t, err, "cairn-phase", "a new migration without headers")
}
