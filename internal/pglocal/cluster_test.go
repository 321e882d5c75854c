package pglocal

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testTemplate is a data directory initialized once per test binary: most
// tests start from a copy of it, since initdb takes seconds. Its name follows
// internal/testenv's pattern, so a later run removes it if this binary dies.
var testTemplate struct {
	once sync.Once
	dir  string
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testTemplate.dir != "" {
		_ = os.RemoveAll(filepath.Dir(testTemplate.dir))
	}
	os.Exit(code)
}

// freshConfig returns a Config for a new cluster under the test's temporary
// directory, which does not exist yet. Binaries that are missing skip the
// test, unless CI=true.
func freshConfig(t *testing.T) Config {
	t.Helper()
	if _, err := findBinaries(t.Context(), "", os.Getenv); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	if os.Geteuid() == 0 {
		// t.TempDir's parent is private (0700); the server's account must
		// traverse it.
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o755))
	}
	return Config{
		DataDir:       filepath.Join(dir, "data"),
		Settings:      map[string]string{"fsync": "off"},
		DieWithParent: true,
	}
}

// testConfig is freshConfig with DataDir holding an initialized cluster.
func testConfig(t *testing.T) Config {
	t.Helper()
	cfg := freshConfig(t)
	testTemplate.once.Do(func() {
		testTemplate.dir, testTemplate.err = initTemplate(context.Background())
	})
	require.NoError(t, testTemplate.err)
	out, err := exec.Command("cp", "-a", testTemplate.dir, cfg.DataDir).CombinedOutput()
	require.NoError(t, err, "copy the template data dir: %s", out)
	return cfg
}

func initTemplate(ctx context.Context) (string, error) {
	parent, err := os.MkdirTemp("", "cairn-testpg-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return "", err
	}
	if err := os.Chmod(parent, 0o755); err != nil {
		return "", err
	}
	cfg, err := Config{DataDir: filepath.Join(parent, "data"), Settings: map[string]string{"fsync": "off"}}.normalize()
	if err != nil {
		return "", err
	}
	bins, err := findBinaries(ctx, "", os.Getenv)
	if err != nil {
		return "", err
	}
	var acct *account
	if os.Geteuid() == 0 {
		if acct, err = lookupOrCreateAccount(ctx); err != nil {
			return "", err
		}
	}
	return prepareDataDir(ctx, cfg, bins, acct, func(string, ...any) {})
}

// startCluster starts a cluster and stops it at the end of the test.
func startCluster(t *testing.T, cfg Config) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	return c
}

// startKeeping starts a cluster (its caller stops or kills it) and commits a
// table kept holding v, for a later cluster on the same data directory to find.
func startKeeping(t *testing.T, cfg Config, v int) *Cluster {
	t.Helper()
	c, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	_, err = openDB(t, c.URL("postgres")).ExecContext(t.Context(), fmt.Sprintf("CREATE TABLE kept (v int); INSERT INTO kept VALUES (%d)", v))
	require.NoError(t, err)
	return c
}

func openDB(t *testing.T, url string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func queryString(t *testing.T, db *sql.DB, query string) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRowContext(t.Context(), query).Scan(&s))
	return s
}

func TestStart(t *testing.T) {
	t.Parallel()
	cfg := freshConfig(t)
	cfg.Settings["max_connections"] = "57"
	c := startCluster(t, cfg)

	require.NotZero(t, c.Port())
	password, err := os.ReadFile(c.PasswordFile())
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("postgres://cairn:%s@127.0.0.1:%d/app?sslmode=disable", strings.TrimSpace(string(password)), c.Port()), c.URL("app"))
	require.FileExists(t, c.LogFile())
	require.FileExists(t, filepath.Join(c.DataDir(), ".s.PGSQL."+strconv.Itoa(c.Port())))

	db := openDB(t, c.URL("postgres"))
	require.Equal(t, "57", queryString(t, db, "SHOW max_connections"))
	require.Equal(t, "128MB", queryString(t, db, "SHOW shared_buffers"))
	require.Equal(t, "127.0.0.1", queryString(t, db, "SHOW listen_addresses"))
	require.Equal(t, "off", queryString(t, db, "SHOW fsync"))
	require.Equal(t, "UTF8", queryString(t, db, "SHOW server_encoding"))
	require.Equal(t, "cairn", queryString(t, db, "SELECT current_user"))

	require.NoError(t, c.CreateDatabase(t.Context(), "app", ""))
	require.NoError(t, c.CreateDatabase(t.Context(), "app", ""), "an existing database is not an error")
	app := openDB(t, c.URL("app"))
	require.Equal(t, "app", queryString(t, app, "SELECT current_database()"))

	if os.Geteuid() == 0 {
		// initdb and postgres refuse root: the server runs as another account.
		pid, err := readPidFile(filepath.Join(c.DataDir(), pidFileName))
		require.NoError(t, err)
		fi, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		require.NoError(t, err)
		require.NotZero(t, fi.Sys().(*syscall.Stat_t).Uid)
	}
}

func TestStopStartKeepsPortAndData(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testConfig(t))
	port := c.Port()
	db := openDB(t, c.URL("postgres"))
	_, err := db.ExecContext(t.Context(), "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before stop')")
	require.NoError(t, err)

	require.NoError(t, c.Stop(t.Context()))
	require.NoError(t, c.Stop(t.Context()), "stopping twice is fine")
	require.Error(t, db.PingContext(t.Context()), "the server is down")

	require.NoError(t, c.Start(t.Context()))
	require.NoError(t, c.Start(t.Context()), "starting a running cluster is a no-op")
	require.Equal(t, port, c.Port())
	require.Equal(t, "before stop", queryString(t, db, "SELECT v FROM kept"))
}

func TestReuseDataDir(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	first := startKeeping(t, cfg, 42)
	require.NoError(t, first.Stop(t.Context()))

	second := startCluster(t, cfg)
	require.Equal(t, "42", queryString(t, openDB(t, second.URL("postgres")), "SELECT v::text FROM kept"))
}

// TestLeftoverDeadServer: the previous owner and its server were SIGKILLed,
// leaving postmaster.pid naming a dead process and committed data to recover.
func TestLeftoverDeadServer(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c := startKeeping(t, cfg, 7)
	require.NoError(t, c.Kill())
	require.FileExists(t, filepath.Join(c.DataDir(), pidFileName), "a killed server leaves its pid file")

	c2 := startCluster(t, cfg)
	require.Equal(t, "7", queryString(t, openDB(t, c2.URL("postgres")), "SELECT v::text FROM kept"))

	// Same, restarting the same Cluster on its own port.
	require.NoError(t, c2.Kill())
	require.NoError(t, c2.Start(t.Context()))
	require.Equal(t, "7", queryString(t, openDB(t, c2.URL("postgres")), "SELECT v::text FROM kept"))
}

// TestLeftoverReusedPid: postmaster.pid names a live process that is not
// PostgreSQL (the id was reused after a crash). PostgreSQL alone would refuse
// to start.
func TestLeftoverReusedPid(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, c.Kill())
	pidPath := filepath.Join(c.DataDir(), pidFileName)
	b, err := os.ReadFile(pidPath)
	require.NoError(t, err)
	_, rest, _ := strings.Cut(string(b), "\n")
	require.NoError(t, os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"+rest), 0o600))

	c2 := startCluster(t, cfg)
	require.NoError(t, openDB(t, c2.URL("postgres")).PingContext(t.Context()))
}

// TestLeftoverRunningServer: the previous owner was SIGKILLed and its server
// survived, on another port. The new cluster stops it and takes over.
func TestLeftoverRunningServer(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	old, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = old.Stop(context.Background()) })
	oldDB := openDB(t, old.URL("postgres"))
	_, err = oldDB.ExecContext(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (3)")
	require.NoError(t, err)

	c := startCluster(t, cfg)
	require.NotEqual(t, old.Port(), c.Port())
	require.True(t, old.proc.exited(), "the left-over server was stopped")
	require.Equal(t, "3", queryString(t, openDB(t, c.URL("postgres")), "SELECT v::text FROM kept"))
	require.Error(t, oldDB.PingContext(t.Context()))
	require.NoError(t, old.Stop(t.Context()), "stopping a server someone else stopped is fine")
}

// TestLeftoverOrphanedServer: as above, but the surviving server is not our
// child (its parent exited, as when cairn is SIGKILLed), so nothing here can
// wait for it: the new cluster must recognise and stop it by its pid.
func TestLeftoverOrphanedServer(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	require.NoError(t, c.Stop(t.Context()))

	// Start postgres through a shell that exits at once: the server is
	// re-parented away from this process.
	port, err := freePort()
	require.NoError(t, err)
	args := append([]string{c.bins.postgres}, c.serverArgs(port)...)
	cmd := exec.Command("/bin/sh", "-c", `"$@" >>postgres.log 2>&1 </dev/null &`, "sh")
	cmd.Args = append(cmd.Args, args...)
	cmd.Dir = c.DataDir()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if c.acct != nil {
		cmd.SysProcAttr.Credential = c.acct.credential()
	}
	require.NoError(t, cmd.Run())
	orphanDB := openDB(t, c.urlFor(port, "postgres"))
	// Wait for the orphan to accept connections.
	require.Eventually(t, func() bool { return orphanDB.PingContext(t.Context()) == nil }, 30*time.Second, 20*time.Millisecond)
	orphan, err := readPidFile(filepath.Join(c.DataDir(), pidFileName))
	require.NoError(t, err)
	t.Cleanup(func() { _ = syscall.Kill(orphan, syscall.SIGKILL) })

	c2 := startCluster(t, cfg)
	require.False(t, processAlive(orphan), "the orphaned server was stopped")
	require.NoError(t, openDB(t, c2.URL("postgres")).PingContext(t.Context()))
}

// TestLeftoverOrphanedBackend: the postmaster was SIGKILLed but one of its
// backends lives on (here: stopped, so it cannot notice), keeping the old
// shared memory attached. PostgreSQL alone would refuse to start.
func TestLeftoverOrphanedBackend(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	c, err := Start(t.Context(), cfg)
	require.NoError(t, err)
	conn, err := openDB(t, c.URL("postgres")).Conn(t.Context())
	require.NoError(t, err)
	var backend int
	require.NoError(t, conn.QueryRowContext(t.Context(), "SELECT pg_backend_pid()").Scan(&backend))
	require.NoError(t, syscall.Kill(backend, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(backend, syscall.SIGKILL) })

	c.mu.Lock()
	p := c.proc
	c.proc = nil
	c.mu.Unlock()
	require.NoError(t, syscall.Kill(p.pid, syscall.SIGKILL))
	<-p.done
	require.True(t, processAlive(backend))

	c2 := startCluster(t, cfg)
	require.False(t, processAlive(backend), "the orphaned backend was killed")
	require.NoError(t, openDB(t, c2.URL("postgres")).PingContext(t.Context()))
}

func TestPortInUse(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cfg := testConfig(t)
	cfg.Port = l.Addr().(*net.TCPAddr).Port

	_, err = Start(t.Context(), cfg)
	require.ErrorIs(t, err, errPortInUse)
	require.ErrorContains(t, err, strconv.Itoa(cfg.Port))
}

func TestDataDirErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		prepare func(t *testing.T, dataDir string)
		want    string
	}{
		{
			name: "not empty, not a cluster",
			prepare: func(t *testing.T, dataDir string) {
				require.NoError(t, os.MkdirAll(dataDir, 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(dataDir, "notes.txt"), []byte("x"), 0o600))
			},
			want: "holds no PostgreSQL cluster",
		},
		{
			name: "other major version",
			prepare: func(t *testing.T, dataDir string) {
				require.NoError(t, os.MkdirAll(dataDir, 0o700))
				require.NoError(t, os.WriteFile(filepath.Join(dataDir, "PG_VERSION"), []byte("9.6\n"), 0o600))
			},
			want: "initialized by PostgreSQL 9.6",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := freshConfig(t)
			tt.prepare(t, cfg.DataDir)
			_, err := Start(t.Context(), cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestRootUntraversableParent(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("only root runs the server as another account")
	}
	cfg := freshConfig(t)
	private := filepath.Join(filepath.Dir(cfg.DataDir), "private")
	require.NoError(t, os.Mkdir(private, 0o700))
	cfg.DataDir = filepath.Join(private, "nested", "data")

	_, err := Start(t.Context(), cfg)
	require.ErrorContains(t, err, "cannot enter "+private+" ")
	fi, err := os.Stat(private)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "permissions are left alone")
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "no data dir", cfg: Config{}, want: "DataDir is required"},
		{name: "port", cfg: Config{DataDir: "x", Port: 70000}, want: "out of range"},
		{name: "reserved setting", cfg: Config{DataDir: "x", Settings: map[string]string{"Port": "1"}}, want: "reserved"},
		{name: "bad setting name", cfg: Config{DataDir: "x", Settings: map[string]string{"a=b": "1"}}, want: "invalid setting"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Start(t.Context(), tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	found, err := findBinaries(t.Context(), "", os.Getenv)
	if err != nil {
		t.Skip(err)
	}
	empty := t.TempDir()
	env := func(kv map[string]string) func(string) string {
		return func(k string) string { return kv[k] }
	}
	tests := []struct {
		name    string
		binDir  string
		getenv  func(string) string
		wantDir string
		wantErr error
	}{
		{name: "BinDir", binDir: found.dir, getenv: env(nil), wantDir: found.dir},
		{name: "CAIRN_PG_BIN", getenv: env(map[string]string{EnvBinDir: found.dir}), wantDir: found.dir},
		{name: "BinDir without binaries", binDir: empty, getenv: env(nil), wantErr: ErrNoBinaries},
		{name: "CAIRN_PG_BIN without binaries", getenv: env(map[string]string{EnvBinDir: empty}), wantErr: ErrNoBinaries},
		{name: "PATH", getenv: env(map[string]string{"PATH": found.dir}), wantDir: found.dir},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b, err := findBinaries(t.Context(), tt.binDir, tt.getenv)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				require.ErrorContains(t, err, "apt-get install postgresql")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantDir, b.dir)
			require.NotEmpty(t, b.major)
		})
	}
}

// dieWithParentEnv makes the test binary a helper process that starts a
// cluster with DieWithParent, prints its postmaster pid and waits to be killed.
const dieWithParentEnv = "PGLOCAL_TEST_DIE_WITH_PARENT_DIR"

func TestDieWithParent(t *testing.T) {
	if dir := os.Getenv(dieWithParentEnv); dir != "" {
		c, err := Start(context.Background(), Config{DataDir: dir, Settings: map[string]string{"fsync": "off"}, DieWithParent: true})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		pid, _ := readPidFile(filepath.Join(c.DataDir(), pidFileName))
		fmt.Println("pid:", pid)
		select {}
	}
	t.Parallel()
	cfg := freshConfig(t)
	helper := exec.Command(os.Args[0], "-test.run=^TestDieWithParent$")
	helper.Env = append(os.Environ(), dieWithParentEnv+"="+cfg.DataDir)
	out, err := helper.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, helper.Start())
	t.Cleanup(func() { _ = helper.Process.Kill(); _ = helper.Wait() })

	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err)
	var pid int
	_, err = fmt.Sscanf(line, "pid: %d", &pid)
	require.NoError(t, err, "helper said %q", line)
	require.True(t, processAlive(pid))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	require.NoError(t, helper.Process.Signal(syscall.SIGKILL))
	// Wait for the kernel's parent-death signal to shut the server down.
	require.Eventually(t, func() bool { return !processAlive(pid) }, 30*time.Second, 20*time.Millisecond)
	procs, err := serverProcessesOf(filepath.Clean(cfg.DataDir))
	require.NoError(t, err)
	require.Empty(t, procs, "the backends went with the postmaster")
}

func TestCreateDatabaseStopped(t *testing.T) {
	t.Parallel()
	c := startCluster(t, testConfig(t))
	require.NoError(t, c.Stop(t.Context()))
	require.ErrorContains(t, c.CreateDatabase(t.Context(), "app", ""), "create database app")
}
