package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/pglocal"
	"github.com/cairnrun/cairn/internal/testenv"
)

// newDevDir returns a new folder for `cairn dev` owned by uid. As root,
// PostgreSQL runs as an unprivileged account that must reach the folder, which
// t.TempDir() (mode 0700) is not.
func newDevDir(t *testing.T, uid int) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cairn-dev-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	if uid != os.Geteuid() {
		require.NoError(t, os.Chown(dir, uid, uid))
	}
	return dir
}

// devPGPort returns the port of the PostgreSQL of a `cairn dev`, from its log.
func devPGPort(t *testing.T, p *devProcess) int {
	t.Helper()
	m := regexp.MustCompile(`msg="postgres ready".* port=(\d+)`).FindStringSubmatch(p.stderr.String())
	require.NotNil(t, m, "no 'postgres ready' line in the log:\n%s", p.stderr.String())
	port, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return port
}

// TestDevDatabaseNeedsPassword is the database side of a handler's isolation
// (docs/security.md): a handler of `cairn dev` found PostgreSQL's port in
// /proc/net/tcp, logged in as the superuser without a password and ran shell
// commands outside the sandbox with COPY … TO PROGRAM (as postgres on a root
// server; as the server's own user on a non-root one, where it read the tokens
// and keys). Now no connection gets in without a password, over TCP or the Unix
// socket, and the roles the server works as are not superusers and cannot run
// programs. Both ways PostgreSQL runs: `cairn dev` as root (the cluster as the
// postgres account) and as an ordinary user (the cluster as that user).
func TestDevDatabaseNeedsPassword(t *testing.T) {
	t.Parallel()
	type user struct {
		name string
		uid  int
	}
	users := []user{{name: "as uid " + strconv.Itoa(os.Geteuid()), uid: os.Geteuid()}}
	if os.Geteuid() == 0 {
		users = append(users, user{name: "as nobody", uid: 65534})
	}
	for _, u := range users {
		t.Run(u.name, func(t *testing.T) {
			t.Parallel()
			dir := newDevDir(t, u.uid)
			p, _ := startDev(t, dir, func(cmd *exec.Cmd) {
				cmd.Env = append(os.Environ(), "HOME="+dir)
				if u.uid != os.Geteuid() {
					cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.uid)}}
				}
			})
			port := devPGPort(t, p)
			pgDir := filepath.Join(dir, ".cairn", "pg")

			for _, role := range []string{"cairn", "postgres", "cairn_app", "cairn_owner"} {
				testenv.RequireNoLogin(t, fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=cairn sslmode=disable", port, role))
				testenv.RequireNoLogin(t, fmt.Sprintf("host=%s port=%d user=%s dbname=cairn sslmode=disable", pgDir, port, role))
			}

			// The superuser's password: in the data dir, for the server's account only.
			pid := devPGPid(t, pgDir)
			server, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
			require.NoError(t, err)
			serverUID := server.Sys().(*syscall.Stat_t).Uid
			if u.uid == 0 {
				require.NotZero(t, serverUID, "as root, PostgreSQL runs as an account of its own")
			} else {
				require.Equal(t, uint32(u.uid), serverUID)
			}
			passwordFile := filepath.Join(pgDir, pglocal.PasswordFileName)
			fi, err := os.Stat(passwordFile)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			require.Equal(t, serverUID, fi.Sys().(*syscall.Stat_t).Uid)
			password, err := os.ReadFile(passwordFile)
			require.NoError(t, err)
			super := devSuperuser(t, port, strings.TrimSpace(string(password)))

			// The roles the running server works as (its pool, its LISTEN
			// connection) and the one that migrated: no superuser, and no
			// program runs through them.
			var roles []string
			require.NoError(t, super.SelectContext(t.Context(), &roles, `SELECT DISTINCT usename FROM pg_stat_activity
				WHERE datname = 'cairn' AND pid <> pg_backend_pid() AND usename IS NOT NULL ORDER BY 1`))
			require.Equal(t, []string{"cairn_app"}, roles)
			for _, role := range []string{"cairn_app", "cairn_owner"} {
				requireUnprivileged(t, super, role)
			}
			// The server works: a deploy writes the catalog as cairn_app.
			require.Contains(t, p.deployHello(t), "hello")
		})
	}
}

// devPGPid returns the postmaster's process id from postmaster.pid in pgDir.
func devPGPid(t *testing.T, pgDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pgDir, "postmaster.pid"))
	require.NoError(t, err)
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	require.NoError(t, err)
	return pid
}

// devSuperuser connects to `cairn dev`'s database as the cluster's superuser.
func devSuperuser(t *testing.T, port int, password string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Connect("postgres", fmt.Sprintf("host=127.0.0.1 port=%d user=cairn password=%s dbname=cairn sslmode=disable", port, password))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// requireUnprivileged checks, through the superuser's connection super, that
// role is no superuser, may create neither databases nor roles, and is refused
// COPY … TO PROGRAM, which once let a handler run `id` outside the sandbox.
func requireUnprivileged(t *testing.T, super *sqlx.DB, role string) {
	t.Helper()
	var attrs struct {
		Super, CreateDB, CreateRole, Replication, BypassRLS bool
	}
	require.NoError(t, super.QueryRowContext(t.Context(), `SELECT rolsuper, rolcreatedb, rolcreaterole, rolreplication, rolbypassrls
		FROM pg_roles WHERE rolname = $1`, role).Scan(&attrs.Super, &attrs.CreateDB, &attrs.CreateRole, &attrs.Replication, &attrs.BypassRLS))
	require.Zero(t, attrs, "%s has privileges", role)

	tx, err := super.BeginTx(t.Context(), nil)
	require.NoError(t, err)
	defer tx.Rollback()
	_, err = tx.ExecContext(t.Context(), "SET LOCAL ROLE "+pq.QuoteIdentifier(role))
	require.NoError(t, err)
	_, err = tx.ExecContext(t.Context(), `COPY (SELECT 1) TO PROGRAM 'id'`)
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "COPY TO PROGRAM as %s: want a refusal, got %v", role, err)
	require.Equal(t, pq.ErrorCode("42501"), pqErr.Code, "COPY TO PROGRAM as %s: want permission denied, got %v", role, err)
}

// TestDevUpgradesTrustDataDir: a data dir made by a `cairn dev` of before the
// passwords (trust authentication; no password file; the catalog kept as the
// superuser's, who also ran the migrations) starts with passwords, keeps its
// data, and the catalog moves to cairn_owner, so the server works as cairn_app.
func TestDevUpgradesTrustDataDir(t *testing.T) {
	t.Parallel()
	dir := newDevDir(t, os.Geteuid())
	pgDir := filepath.Join(dir, ".cairn", "pg")
	require.NoError(t, os.MkdirAll(filepath.Dir(pgDir), 0o755))
	old, err := pglocal.Start(t.Context(), pglocal.Config{DataDir: pgDir, Settings: map[string]string{"fsync": "off"}, DieWithParent: true})
	require.NoError(t, err)
	require.NoError(t, old.CreateDatabase(t.Context(), "cairn", ""))
	store, err := catalog.Open(t.Context(), old.URL("cairn"), nil)
	require.NoError(t, err)
	_, err = store.Migrate(t.Context(), nil)
	require.NoError(t, err)
	_, err = store.DB().ExecContext(t.Context(), `INSERT INTO workflows (name) VALUES ('before-upgrade')`)
	require.NoError(t, err)
	require.NoError(t, store.Close())
	require.NoError(t, old.Kill())
	require.NoError(t, os.Remove(old.PasswordFile()))
	require.NoError(t, os.WriteFile(filepath.Join(pgDir, "pg_hba.conf"),
		[]byte("local all all trust\nhost all all 127.0.0.1/32 trust\n"), 0o600))

	p, _ := startDev(t, dir)
	port := devPGPort(t, p)
	testenv.RequireNoLogin(t, fmt.Sprintf("host=127.0.0.1 port=%d user=cairn dbname=cairn sslmode=disable", port))
	require.Contains(t, p.deployHello(t), "hello")
	password, err := os.ReadFile(filepath.Join(pgDir, pglocal.PasswordFileName))
	require.NoError(t, err)
	super := devSuperuser(t, port, strings.TrimSpace(string(password)))
	var names []string
	require.NoError(t, super.SelectContext(t.Context(), &names, `SELECT name FROM workflows ORDER BY name`))
	require.Equal(t, []string{"before-upgrade", "hello"}, names)
	var owners []string
	require.NoError(t, super.SelectContext(t.Context(), &owners, `SELECT DISTINCT relowner::regrole::text FROM pg_class
		WHERE relnamespace = 'public'::regnamespace`))
	require.Equal(t, []string{"cairn_owner"}, owners)
}
