package pglocal

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

// requireRefused checks that a connection to dsn is refused for want of a
// password: the server answers with an authentication error (class 28), so the
// connection reached it and was turned away there.
func requireRefused(t *testing.T, dsn string) {
	t.Helper()
	err := openDB(t, dsn).PingContext(t.Context())
	require.Error(t, err, "%s got in without a password", dsn)
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "want the server's refusal, got %v", err)
	require.Equal(t, pq.ErrorClass("28"), pqErr.Code.Class(), "want an authentication error, got %v", err)
}

// TestPasswordOnEveryConnection: `psql -h 127.0.0.1 -p <port> -U cairn` once logged
// in as the superuser without a password, from anywhere on the machine. No
// connection gets in without the password now: over TCP on 127.0.0.1 or over the
// Unix socket, as the superuser or as any other role.
func TestPasswordOnEveryConnection(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testConfig(t))

	for _, user := range []string{"cairn", "postgres"} {
		requireRefused(t, fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=postgres sslmode=disable", c.Port(), user))
		requireRefused(t, fmt.Sprintf("host=%s port=%d user=%s dbname=postgres sslmode=disable", c.DataDir(), c.Port(), user))
	}
}

// TestPasswordFile: the superuser's password is random, kept in the data
// directory where only the server's account can read it, and survives restarts.
// The pg_hba.conf the server reads trusts nobody.
func TestPasswordFile(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := startCluster(t, cfg)

	fi, err := os.Stat(c.PasswordFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	pid, err := readPidFile(filepath.Join(c.DataDir(), pidFileName))
	require.NoError(t, err)
	server, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	require.NoError(t, err)
	require.Equal(t, server.Sys().(*syscall.Stat_t).Uid, fi.Sys().(*syscall.Stat_t).Uid, "owned by the server's account")
	password, err := os.ReadFile(c.PasswordFile())
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(strings.TrimSpace(string(password))), 20)

	hba := queryString(t, openDB(t, c.URL("postgres")),
		"SELECT string_agg(DISTINCT auth_method, ',') FROM pg_hba_file_rules WHERE error IS NULL")
	require.Equal(t, "scram-sha-256", hba)

	// The same Cluster restarted, after a crash, keeps its URL, even when the
	// file went away meanwhile.
	db := openDB(t, c.URL("postgres"))
	require.NoError(t, c.Kill())
	require.NoError(t, os.Remove(c.PasswordFile()))
	require.NoError(t, c.Start(t.Context()))
	require.NoError(t, db.PingContext(t.Context()))
	require.FileExists(t, c.PasswordFile())

	// Another Cluster on the data directory reads the password from the file.
	require.NoError(t, c.Stop(t.Context()))
	c2 := startCluster(t, cfg)
	require.Equal(t, urlPassword(t, c), urlPassword(t, c2))
	// Without the file, it sets a new one.
	require.NoError(t, c2.Stop(t.Context()))
	require.NoError(t, os.Remove(c2.PasswordFile()))
	c3 := startCluster(t, cfg)
	require.NotEqual(t, urlPassword(t, c), urlPassword(t, c3))
	require.NoError(t, openDB(t, c3.URL("postgres")).PingContext(t.Context()))
	requireRefused(t, c3.RoleURL("postgres", "cairn", urlPassword(t, c)))
}

// urlPassword returns the password in c's URL.
func urlPassword(t *testing.T, c *Cluster) string {
	t.Helper()
	u, err := url.Parse(c.URL("postgres"))
	require.NoError(t, err)
	password, ok := u.User.Password()
	require.True(t, ok)
	return password
}

// TestWrongPasswordFile: a password file that does not match the server's
// password is an error saying what to do.
func TestWrongPasswordFile(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := startCluster(t, cfg)
	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, os.WriteFile(c.PasswordFile(), []byte("not-the-password\n"), 0o600))

	_, err := Start(t.Context(), cfg)
	require.ErrorContains(t, err, "is not the superuser's: remove the file")
}

// TestTrustDataDirUpgraded: a data directory initialized by an earlier version
// (trust authentication, no password file) with a database kept as the
// superuser's. It starts with passwords, and CreateDatabase hands the database
// and its objects to the role that should own them.
func TestTrustDataDirUpgraded(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	old := startKeeping(t, cfg, 5)
	require.NoError(t, old.CreateDatabase(t.Context(), "app", ""))
	_, err := openDB(t, old.URL("app")).ExecContext(t.Context(), `
		CREATE TABLE items (id serial PRIMARY KEY, n int GENERATED ALWAYS AS IDENTITY, v text);
		CREATE SEQUENCE tickets;
		CREATE VIEW item_names AS SELECT v FROM items;
		CREATE TYPE mood AS ENUM ('ok');
		CREATE DOMAIN positive AS int CHECK (VALUE > 0);
		CREATE FUNCTION add_item(text) RETURNS void LANGUAGE sql AS 'INSERT INTO items (v) VALUES ($1)';
		INSERT INTO items (v) VALUES ('kept');`)
	require.NoError(t, err)
	require.NoError(t, old.Kill())
	// What the earlier version left: no password file, trust for everyone.
	require.NoError(t, os.Remove(old.PasswordFile()))
	require.NoError(t, os.WriteFile(filepath.Join(old.DataDir(), hbaFileName),
		[]byte("local all all trust\nhost all all 127.0.0.1/32 trust\n"), 0o600))

	c := startCluster(t, cfg)
	requireRefused(t, fmt.Sprintf("host=127.0.0.1 port=%d user=cairn dbname=postgres sslmode=disable", c.Port()))
	require.Equal(t, "5", queryString(t, openDB(t, c.URL("postgres")), "SELECT v::text FROM kept"))

	const password = "owner-password-1"
	require.NoError(t, c.CreateRole(t.Context(), "app_owner", password))
	require.NoError(t, c.CreateDatabase(t.Context(), "app", "app_owner"))
	super := openDB(t, c.URL("app"))
	require.Equal(t, "app_owner", queryString(t, super, `SELECT string_agg(DISTINCT o, ',') FROM (
		SELECT relowner::regrole::text FROM pg_class WHERE relnamespace = 'public'::regnamespace
		UNION ALL SELECT proowner::regrole::text FROM pg_proc WHERE pronamespace = 'public'::regnamespace
		UNION ALL SELECT typowner::regrole::text FROM pg_type WHERE typnamespace = 'public'::regnamespace
		UNION ALL SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'public'
		UNION ALL SELECT datdba::regrole::text FROM pg_database WHERE datname = 'app') AS owners(o)`))

	owner := openDB(t, c.RoleURL("app", "app_owner", password))
	_, err = owner.ExecContext(t.Context(), `SELECT add_item('new'); ALTER TABLE items ADD COLUMN w text; SELECT nextval('tickets')`)
	require.NoError(t, err)
	require.Equal(t, "kept,new", queryString(t, owner, "SELECT string_agg(v, ',' ORDER BY id) FROM items"))
}

// TestRoles: a role from CreateRole logs in with its password only, is no
// superuser and cannot run programs; a role given access to a database reads
// and writes its rows and cannot change its schema.
func TestRoles(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testConfig(t))
	ctx := t.Context()
	require.NoError(t, c.CreateRole(ctx, "owner", "owner-password-1"))
	require.NoError(t, c.CreateRole(ctx, "app", "app-password-1"))
	require.NoError(t, c.CreateRole(ctx, "app", "app-password-2"), "an existing role gets the new password")
	require.ErrorContains(t, c.CreateRole(ctx, "cairn", "x"), "superuser")
	require.NoError(t, c.CreateDatabase(ctx, "data", "owner"))

	owner := openDB(t, c.RoleURL("data", "owner", "owner-password-1"))
	_, err := owner.ExecContext(ctx, `CREATE TABLE items (id bigserial PRIMARY KEY, v text)`)
	require.NoError(t, err)
	require.NoError(t, c.GrantAccess(ctx, "data", "app"))
	_, err = owner.ExecContext(ctx, `CREATE TABLE later (v text)`)
	require.NoError(t, err)

	requireRefused(t, c.RoleURL("data", "app", "app-password-1"))
	requireRefused(t, fmt.Sprintf("host=%s port=%d user=app dbname=data sslmode=disable", c.DataDir(), c.Port()))
	app := openDB(t, c.RoleURL("data", "app", "app-password-2"))
	_, err = app.ExecContext(ctx, `INSERT INTO items (v) VALUES ('a'); UPDATE items SET v = 'b'; INSERT INTO later VALUES ('c')`)
	require.NoError(t, err, "the app uses the rows of tables made before and after the grant")
	require.Equal(t, "b", queryString(t, app, "SELECT v FROM items"))

	for _, role := range []*sql.DB{owner, app} {
		require.Equal(t, "false", queryString(t, role,
			"SELECT (rolsuper OR rolcreatedb OR rolcreaterole)::text FROM pg_roles WHERE rolname = current_user"))
		requirePermissionDenied(t, role, `COPY (SELECT 1) TO PROGRAM 'true'`)
		requirePermissionDenied(t, role, `CREATE DATABASE other`)
	}
	requirePermissionDenied(t, app, `CREATE TABLE mine (v text)`)
	requirePermissionDenied(t, app, `DROP TABLE items`)
	requirePermissionDenied(t, app, `ALTER TABLE items ADD COLUMN w text`)
}

// requirePermissionDenied checks that db refuses query for want of privilege.
func requirePermissionDenied(t *testing.T, db *sql.DB, query string) {
	t.Helper()
	_, err := db.ExecContext(t.Context(), query)
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "%s: want a refusal, got %v", query, err)
	require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "%s: want insufficient_privilege, got %v", query, err)
}
