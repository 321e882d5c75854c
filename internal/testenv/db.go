package testenv

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/ory/dockertest/v3"
	"github.com/ory/dockertest/v3/docker"
	"github.com/peterldowns/pgtestdb"
	"github.com/peterldowns/pgtestdb/migrators/goosemigrator"
	"github.com/pressly/goose/v3"

	"github.com/cairnrun/cairn/internal/pglocal"
	"github.com/cairnrun/cairn/migrations"
)

// EnvDatabaseURL names the variable holding a superuser URL of an existing
// PostgreSQL server for the tests, e.g.
// "postgres://postgres:secret@127.0.0.1:5432/postgres?sslmode=disable". When
// set, no server is started. Without sslmode, sslmode=disable is assumed.
const EnvDatabaseURL = "CAIRN_TEST_DATABASE_URL"

const (
	// dbTempDirPrefix names the data directories of local test clusters; the
	// pid after it lets a later run remove those of test binaries that died.
	dbTempDirPrefix = "cairn-testpg-"
	// dbDockerRepository and dbDockerTag pin the image of the Docker fallback.
	dbDockerRepository = "postgres"
	dbDockerTag        = "16.4"
	// dbDockerLabel marks the containers of the Docker fallback; the owner
	// label ("host:pid") lets a later run remove those of dead test binaries.
	dbDockerLabel      = "cairn.testenv"
	dbDockerOwnerLabel = "cairn.testenv.owner"
	// dbContainerLifetime caps a container's life, in seconds: there is no
	// hook at the end of a test binary to remove it sooner.
	dbContainerLifetime = 60 * 60
	// dbStartTimeout bounds the start of a server.
	dbStartTimeout = 2 * time.Minute
	// dbStopTimeout bounds the stop of a test's private cluster.
	dbStopTimeout = 30 * time.Second
	dbInstallHint = "no PostgreSQL server for the tests: install the PostgreSQL server " +
		"(Debian/Ubuntu: apt-get install postgresql, or set " + pglocal.EnvBinDir +
		" to the directory holding initdb and postgres), start Docker, or set " +
		EnvDatabaseURL + " to a superuser URL of a running server"
)

// dbTestSettings trade durability for speed. They are fine for throw-away
// test clusters and nowhere else.
func dbTestSettings() map[string]string {
	return map[string]string{
		"fsync":              "off",
		"synchronous_commit": "off",
		"full_page_writes":   "off",
	}
}

// dbShared caches the PostgreSQL server of this test binary: package-level
// state because, without TestMain, there is nowhere else to keep it.
var dbShared struct {
	once        sync.Once
	conf        pgtestdb.Config // superuser connection
	err         error           // a server was found but failed to start
	unavailable string          // no server could be found
}

// dbStaleOnce removes the left-overs of dead test binaries once per binary.
var dbStaleOnce sync.Once

// DB returns a connection pool to a fresh database for this test, fully
// migrated (a clone of a template database that holds migrations.FS), as a
// role that is neither superuser nor allowed to create databases or roles, like
// the application's, and that owns the database. On the servers testenv starts
// itself that role's password is random (and so is the superuser's, which only
// creates and drops the databases); on a server from CAIRN_TEST_DATABASE_URL it
// is pgtestdb's default role. The pool is closed and the database dropped when
// the test ends (kept if the test failed, for inspection; its URL is logged).
// Backends still connected then, such as those of a killed cairn subprocess,
// are terminated first.
//
// The server is shared by every test of the test binary and chosen once, in
// order: the server named by CAIRN_TEST_DATABASE_URL; a private cluster from
// the installed PostgreSQL binaries (internal/pglocal; fsync off; it dies with
// the test binary and its files are removed by a later run); a postgres:16.4
// container when a Docker engine answers. With none of them DB skips the test,
// or fails it when CI=true. It fails the test when a server is found but does
// not start. Safe for parallel tests.
func DB(t testing.TB) *sqlx.DB {
	t.Helper()
	dsn := DatabaseURL(t)
	db, err := sqlx.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", dsn, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// DatabaseURL is like DB but returns the lib/pq URL of the fresh database
// (with its credentials), for tests that hand it to a cairn subprocess
// (CAIRN_DATABASE_URL).
func DatabaseURL(t testing.TB) string {
	t.Helper()
	conf := dbServer(t)
	instance := pgtestdb.Custom(t, conf, dbMigrator())
	return instance.URL()
}

// PG starts a PostgreSQL cluster for this test alone, from the installed
// binaries, and stops it and removes its files when the test ends. Tests that
// stop, kill or restart PostgreSQL use it (Stop, Kill, Start keep the port
// and data); the shared server of DB cannot be stopped without breaking every
// other test of the binary, and a server from CAIRN_TEST_DATABASE_URL or
// Docker cannot be stopped at all. So PG does not use those: without
// PostgreSQL binaries it skips the test, or fails it when CI=true. Put a
// database on the cluster with ClusterDatabaseURL. Each call runs initdb,
// which takes a few seconds.
func PG(t testing.TB) *pglocal.Cluster {
	t.Helper()
	return pg(t, false)
}

// PGPrimary is PG with replication connections allowed (pglocal's
// Config.Replication), for a standby of it made by PGStandby.
func PGPrimary(t testing.TB) *pglocal.Cluster {
	t.Helper()
	return pg(t, true)
}

// PGStandby copies primary (from PGPrimary) into a streaming replica
// (pg_basebackup -R) for this test alone, starts it, and stops it and removes
// its files when the test ends. It reads only until Promote.
func PGStandby(t testing.TB, primary *pglocal.Cluster) *pglocal.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	settings := dbTestSettings()
	delete(settings, "synchronous_commit")
	dir, err := os.MkdirTemp("", dbTempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	c, err := primary.Standby(ctx, pglocal.Config{DataDir: dir, Settings: settings, DieWithParent: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbStopTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Logf("testenv: stop the standby: %v", err)
		}
		_ = os.RemoveAll(dir)
	})
	return c
}

func pg(t testing.TB, replication bool) *pglocal.Cluster {
	t.Helper()
	dbStaleOnce.Do(dbRemoveStale)
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	// A cluster that is killed on purpose keeps what it acknowledged:
	// synchronous_commit stays on, or a crash loses the last commits (the WAL
	// still in the server's memory) and the tests would see a database that
	// forgot what it had said. fsync and full_page_writes only matter when the
	// machine itself goes down, which these tests do not do.
	settings := dbTestSettings()
	delete(settings, "synchronous_commit")
	c, dir, found, err := dbStartLocal(ctx, settings, replication)
	switch {
	case err != nil:
		t.Fatalf("testenv: %v", err)
	case !found:
		unavailable(t, "testenv.PG needs the PostgreSQL server binaries: "+dbInstallHint)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbStopTimeout)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Logf("testenv: stop postgres: %v", err)
		}
		_ = os.RemoveAll(dir) // best effort
	})
	return c
}

// ClusterDatabaseURL creates a database with a fresh random name on c (from
// PG), owned by a new role of the same name with a random password (neither
// superuser nor allowed to create databases or roles, like DB's), applies
// migrations.FS to it as that role, and returns its URL with that role's
// credentials. The database goes with the cluster; c must be running.
func ClusterDatabaseURL(t testing.TB, c *pglocal.Cluster) string {
	t.Helper()
	dsn := ClusterEmptyDatabaseURL(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", dsn, err)
	}
	defer db.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS, goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatalf("testenv: migrations: %v", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		t.Fatalf("testenv: migrate %s: %v", dsn, err)
	}
	return dsn
}

// ClusterEmptyDatabaseURL is ClusterDatabaseURL without the migrations: the
// database is empty, for a test that migrates it itself (with another binary).
func ClusterEmptyDatabaseURL(t testing.TB, c *pglocal.Cluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	name := "cairn_" + dbRandomSuffix(t)
	password := rand.Text()
	if err := c.CreateRole(ctx, name, password); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := c.CreateDatabase(ctx, name, name); err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return c.RoleURL(name, name, password)
}

// dbMigrator builds the template databases from the embedded migrations.
// pgtestdb names a template by the hash of the files, so an edited migration
// gets a new template instead of a stale one.
func dbMigrator() pgtestdb.Migrator {
	return goosemigrator.New(".", goosemigrator.WithFS(migrations.FS))
}

// dbServer returns the superuser connection of the test binary's server,
// starting it on first use, or ends the test when there is none.
func dbServer(t testing.TB) pgtestdb.Config {
	t.Helper()
	dbShared.once.Do(func() {
		dbShared.conf, dbShared.unavailable, dbShared.err = dbStart()
	})
	switch {
	case dbShared.err != nil:
		t.Fatalf("testenv: %v", dbShared.err)
	case dbShared.unavailable != "":
		unavailable(t, dbShared.unavailable)
	}
	return dbShared.conf
}

// dbUnavailable skips the test, or fails it under CI, where nothing may be
// skipped silently.
func unavailable(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("testenv: %s", msg)
	}
	t.Skipf("testenv: %s", msg)
}

// dbStart finds or starts the test binary's server (see DB for the order).
func dbStart() (conf pgtestdb.Config, unavailable string, err error) {
	if raw := os.Getenv(EnvDatabaseURL); raw != "" {
		// pgtestdb's default role: a role of a server that outlives this binary
		// keeps the password it was created with.
		conf, err := dbConfigFromURL(raw)
		if err != nil {
			return conf, "", fmt.Errorf("%s: %w", EnvDatabaseURL, err)
		}
		return conf, "", nil
	}

	dbStaleOnce.Do(dbRemoveStale)
	ctx, cancel := context.WithTimeout(context.Background(), dbStartTimeout)
	defer cancel()
	c, _, found, err := dbStartLocal(ctx, dbTestSettings(), false)
	if err != nil {
		return conf, "", err
	}
	if found {
		// The cluster is never stopped: it receives SIGQUIT when the test
		// binary exits (DieWithParent).
		conf, err := dbConfigFromURL(c.URL("postgres"))
		conf.TestRole = dbTestRole()
		return conf, "", err
	}

	conf, found, err = dbStartContainer(ctx)
	if err != nil {
		return conf, "", err
	}
	if found {
		conf.TestRole = dbTestRole()
		return conf, "", nil
	}
	return conf, dbInstallHint, nil
}

// dbTestRole is the role DB's databases belong to on a server testenv started:
// pgtestdb's default but for its password, a random one instead of the
// well-known default, since anything on the machine can reach the server. The
// server is new, so the role is created with that password.
func dbTestRole() *pgtestdb.Role {
	role := pgtestdb.DefaultRole()
	role.Password = rand.Text()
	return &role
}

// dbStartLocal starts a cluster on a new data directory under os.TempDir.
// found is false when no PostgreSQL binaries are installed (and
// CAIRN_PG_BIN, which would make their absence an error, is unset).
func dbStartLocal(ctx context.Context, settings map[string]string, replication bool) (c *pglocal.Cluster, dir string, found bool, err error) {
	dir, err = os.MkdirTemp("", dbTempDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, "", false, fmt.Errorf("postgres data dir: %w", err)
	}
	c, err = pglocal.Start(ctx, pglocal.Config{
		DataDir:       dir,
		Settings:      settings,
		DieWithParent: true,
		Replication:   replication,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		if errors.Is(err, pglocal.ErrNoBinaries) && os.Getenv(pglocal.EnvBinDir) == "" {
			return nil, "", false, nil
		}
		return nil, "", true, err
	}
	return c, dir, true, nil
}

// dbConfigFromURL turns a postgres:// URL into pgtestdb's connection config.
func dbConfigFromURL(raw string) (pgtestdb.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return pgtestdb.Config{}, fmt.Errorf("parse database URL: %w", err)
	}
	if u.Scheme != "postgres" && u.Scheme != "postgresql" {
		return pgtestdb.Config{}, fmt.Errorf("database URL %s: want a postgres:// URL", u.Redacted())
	}
	password, _ := u.User.Password()
	conf := pgtestdb.Config{
		DriverName: "postgres",
		Host:       u.Hostname(),
		Port:       u.Port(),
		User:       u.User.Username(),
		Password:   password,
		Database:   strings.TrimPrefix(u.Path, "/"),
		// Test code may leak connections (a killed subprocess's linger for a
		// moment); dropping the database must not fail for that.
		ForceTerminateConnections: true,
	}
	q := u.Query()
	if !q.Has("sslmode") {
		q.Set("sslmode", "disable") // lib/pq's default, require, rarely fits a test server
	}
	conf.Options = q.Encode()
	if conf.Host == "" {
		conf.Host = "127.0.0.1"
	}
	if conf.Port == "" {
		conf.Port = "5432"
	}
	if conf.Database == "" {
		conf.Database = "postgres"
	}
	return conf, nil
}

// dbRemoveStale removes the data directories of local test clusters whose
// test binary is gone (killed, so nothing removed them) and whose server is
// not running.
func dbRemoveStale() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), dbTempDirPrefix+"*"))
	for _, dir := range matches {
		pidText, _, ok := strings.Cut(strings.TrimPrefix(filepath.Base(dir), dbTempDirPrefix), "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || dbProcessAlive(pid) {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, "postmaster.pid")); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			if server, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && dbProcessAlive(server) {
				continue // still running: leave it to whoever owns it
			}
		}
		_ = os.RemoveAll(dir) // best effort
	}
}

// dbStartContainer runs PostgreSQL in Docker. found is false when no Docker
// engine answers.
func dbStartContainer(ctx context.Context) (conf pgtestdb.Config, found bool, err error) {
	pool, err := dockertest.NewPool("")
	if err != nil {
		return conf, false, nil
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Client.PingWithContext(pingCtx); err != nil {
		return conf, false, nil
	}
	host, _ := os.Hostname()
	dbPurgeContainers(pool, host)

	// The shell caps the container's life: after dbContainerLifetime it asks
	// the server (pid 1, once the entrypoint execs it) for a fast shutdown,
	// and Docker removes the stopped container (AutoRemove).
	script := fmt.Sprintf(`(sleep %d; kill -INT 1) & exec docker-entrypoint.sh "$@"`, dbContainerLifetime)
	password := rand.Text() // the image asks every TCP connection for it (scram-sha-256)
	res, err := pool.RunWithOptions(&dockertest.RunOptions{
		Repository: dbDockerRepository,
		Tag:        dbDockerTag,
		Entrypoint: []string{"/bin/sh", "-c", script, "sh"},
		Cmd: []string{"postgres", "-c", "fsync=off", "-c", "synchronous_commit=off",
			"-c", "full_page_writes=off", "-c", "max_connections=200"},
		Env: []string{"POSTGRES_USER=cairn", "POSTGRES_PASSWORD=" + password, "POSTGRES_DB=postgres"},
		Labels: map[string]string{
			dbDockerLabel:      "postgres",
			dbDockerOwnerLabel: host + ":" + strconv.Itoa(os.Getpid()),
		},
	}, func(hc *docker.HostConfig) {
		hc.AutoRemove = true
		hc.RestartPolicy = docker.RestartPolicy{Name: "no"}
	})
	if err != nil {
		return conf, true, fmt.Errorf("start postgres container: %w", err)
	}

	dockerHost := "127.0.0.1"
	if u, err := url.Parse(os.Getenv("DOCKER_HOST")); err == nil && u.Scheme == "tcp" && u.Hostname() != "" {
		dockerHost = u.Hostname()
	}
	conf, err = dbConfigFromURL((&url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword("cairn", password),
		Host:     net.JoinHostPort(dockerHost, res.GetPort("5432/tcp")),
		Path:     "/postgres",
		RawQuery: "sslmode=disable",
	}).String())
	if err != nil {
		_ = pool.Purge(res)
		return conf, true, err
	}
	// The entrypoint's first, temporary server listens on the socket only, so
	// a TCP connection means the real server is up.
	if err := dbWaitReady(ctx, conf.URL()); err != nil {
		_ = pool.Purge(res)
		return conf, true, fmt.Errorf("postgres container %s: %w", conf.Host+":"+conf.Port, err)
	}
	return conf, true, nil
}

// dbPurgeContainers removes the containers of test binaries on this host
// that are no longer running.
func dbPurgeContainers(pool *dockertest.Pool, host string) {
	containers, err := pool.Client.ListContainers(docker.ListContainersOptions{
		All:     true,
		Filters: map[string][]string{"label": {dbDockerLabel + "=postgres"}},
	})
	if err != nil {
		return
	}
	for _, c := range containers {
		ownerHost, pidText, ok := strings.Cut(c.Labels[dbDockerOwnerLabel], ":")
		pid, err := strconv.Atoi(pidText)
		if !ok || err != nil || ownerHost != host || dbProcessAlive(pid) {
			continue
		}
		_ = pool.Client.RemoveContainer(docker.RemoveContainerOptions{ID: c.ID, Force: true, RemoveVolumes: true})
	}
}

// dbWaitReady polls until the server at dsn accepts connections.
func dbWaitReady(ctx context.Context, dsn string) error {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// dbProcessAlive reports whether a process with that pid exists.
func dbProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func dbRandomSuffix(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("testenv: random name: %v", err)
	}
	return hex.EncodeToString(b[:])
}

// RequireNoLogin fails the test unless PostgreSQL turns a connection to dsn
// away at authentication (SQLSTATE class 28, e.g. for want of a password): the
// connection reached the server and the server refused it.
func RequireNoLogin(t testing.TB, dsn string) {
	t.Helper()
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", dsn, err)
	}
	defer db.Close()
	err = db.PingContext(context.Background())
	var pqErr *pq.Error
	switch {
	case err == nil:
		t.Fatalf("%s got in without a password", dsn)
	case !errors.As(err, &pqErr) || pqErr.Code.Class() != "28":
		t.Fatalf("%s: want the server's refusal at authentication, got %v", dsn, err)
	}
}
