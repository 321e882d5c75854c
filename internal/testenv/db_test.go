package testenv

import (
	"io/fs"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/peterldowns/pgtestdb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/migrations"
)

// dbRequireMigrated checks that db holds the catalog schema at the newest version of
// migrations.FS.
func dbRequireMigrated(t *testing.T, db *sqlx.DB) {
	t.Helper()
	var runs bool
	require.NoError(t, db.GetContext(t.Context(), &runs, `SELECT to_regclass('public.runs') IS NOT NULL`))
	require.True(t, runs, "the runs table exists")
	var version int64
	require.NoError(t, db.GetContext(t.Context(), &version, `SELECT max(version_id) FROM goose_db_version WHERE is_applied`))
	files, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	newest, err := strconv.ParseInt(strings.SplitN(files[len(files)-1], "_", 2)[0], 10, 64)
	require.NoError(t, err)
	require.Equal(t, newest, version)
}

func TestDBIsolated(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"alpha", "beta"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			db := DB(t)
			dbRequireMigrated(t, db)

			_, err := db.ExecContext(t.Context(), `INSERT INTO workflows (name) VALUES ($1)`, name)
			require.NoError(t, err)
			// The other subtest writes its own row at the same time, elsewhere.
			var names []string
			require.NoError(t, db.SelectContext(t.Context(), &names, `SELECT name FROM workflows`))
			require.Equal(t, []string{name}, names)
		})
	}
}

func TestDatabaseURLFresh(t *testing.T) {
	t.Parallel()
	first, second := DatabaseURL(t), DatabaseURL(t)
	require.NotEqual(t, first, second)
	db, err := sqlx.Connect("postgres", second)
	require.NoError(t, err)
	defer db.Close()
	dbRequireMigrated(t, db)
	var super bool
	require.NoError(t, db.GetContext(t.Context(), &super, `SELECT rolsuper FROM pg_roles WHERE rolname = current_user`))
	require.False(t, super, "tests connect as an ordinary role, like the application")
}

// TestDBNeedsPassword: the servers the tests start
// let nothing in without a password, and the role of the tests' databases has
// a password of its own, not pgtestdb's well-known default.
func TestDBNeedsPassword(t *testing.T) {
	t.Parallel()
	if os.Getenv(EnvDatabaseURL) != "" {
		t.Skip("the server of " + EnvDatabaseURL + " is configured by whoever runs it")
	}
	u, err := url.Parse(DatabaseURL(t))
	require.NoError(t, err)
	for _, user := range []*url.Userinfo{
		url.User(u.User.Username()),
		url.UserPassword(u.User.Username(), pgtestdb.DefaultRolePassword),
		url.User("cairn"),
		url.User("postgres"),
	} {
		u.User = user
		RequireNoLogin(t, u.String())
	}
}

func TestPGRestart(t *testing.T) {
	t.Parallel()
	c := PG(t)
	db, err := sqlx.Connect("postgres", ClusterDatabaseURL(t, c))
	require.NoError(t, err)
	defer db.Close()
	dbRequireMigrated(t, db)
	var super bool
	require.NoError(t, db.GetContext(t.Context(), &super, `SELECT rolsuper OR rolcreatedb OR rolcreaterole FROM pg_roles WHERE rolname = current_user`))
	require.False(t, super, "a cluster's database belongs to an ordinary role")
	_, err = db.ExecContext(t.Context(), `INSERT INTO workflows (name) VALUES ('kept')`)
	require.NoError(t, err)

	port := c.Port()
	require.NoError(t, c.Stop(t.Context()))
	require.Error(t, db.PingContext(t.Context()))
	require.NoError(t, c.Start(t.Context()))
	require.Equal(t, port, c.Port())

	var name string
	// The pool reconnects to the restarted server; its dead connections fail
	// once each, so allow a few tries.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, db.GetContext(t.Context(), &name, `SELECT name FROM workflows`))
	}, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, "kept", name)
}

func TestDBConfigFromURL(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		url     string
		want    string
		wantErr bool
	}{
		{name: "defaults", url: "postgres://u@db", want: "postgres://u:@db:5432/postgres?sslmode=disable"},
		{name: "kept", url: "postgresql://u:p@h:6543/x?sslmode=require", want: "postgres://u:p@h:6543/x?sslmode=require"},
		{name: "not a url", url: "host=x user=y", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conf, err := dbConfigFromURL(tt.url)
			if tt.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, conf.URL())
		})
	}
}
