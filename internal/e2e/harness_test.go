package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/testenv"
)

// Credentials every test's servers share. The tokens only guard throw-away servers
// on 127.0.0.1.
const (
	operatorToken = "e2e-operator-token"
	viewerToken   = "e2e-viewer-token"
	signingKey    = "e2e-signing-key-0123456789abcdef"
)

// envBinary names a prebuilt cairn binary to use instead of building one.
const envBinary = "CAIRN_E2E_BINARY"

// envPgBouncer, set to 1, puts a PgBouncer in transaction mode between every
// stack's servers and its database (CAIRN_DATABASE_POOL_MODE=transaction, with
// CAIRN_DATABASE_LISTEN_URL the direct URL): the PgBouncer leg of
// scripts/test.sh runs the suite's core so.
const envPgBouncer = "CAIRN_E2E_PGBOUNCER"

// logTail is how much of a server's log a failed test prints.
const logTail = 48 << 10

// TestMain removes the cairn binary that testenv.CairnBinary built, once the tests
// are over.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveCairnBinary()
	os.Exit(code)
}

// cairnBinary returns the path of the cairn binary: $CAIRN_E2E_BINARY, or the one
// testenv.CairnBinary builds from the module's ./cmd/cairn on first use.
func cairnBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(envBinary); p != "" {
		return p
	}
	return testenv.CairnBinary(t)
}

// moduleRoot finds the directory holding go.mod above the working directory (the
// package's directory under go test).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// stack is what the cairn processes of one test share: a database, a blob store,
// the credentials, and a folder for their logs, caches and temporary files.
type stack struct {
	t     *testing.T
	dbURL string
	// serverDBURL is the servers' CAIRN_DATABASE_URL: dbURL, or dbURL through
	// a PgBouncer (stackOptions.pgbouncer).
	serverDBURL string
	blobURL     string
	env         []string // extra environment of every server (S3 credentials)
	dir         string

	mu      sync.Mutex
	servers []*server
	seq     int
}

// stackOptions choose a stack's database and blob store.
type stackOptions struct {
	// dbURL is the catalog; default a fresh migrated database (testenv.DatabaseURL).
	dbURL string
	// blobURL is CAIRN_BLOBSTORE; default a file store in the test's folder.
	blobURL string
	// env is added to every server's environment (AWS_* for an S3 store).
	env []string
	// pgbouncer puts a PgBouncer in transaction mode between the servers and
	// the database; default: when CAIRN_E2E_PGBOUNCER=1.
	pgbouncer bouncing
}

// bouncing says whether and how a stack's servers reach PostgreSQL through a
// PgBouncer.
type bouncing int

const (
	// bounceFromEnv: through a PgBouncer with a direct LISTEN URL when
	// CAIRN_E2E_PGBOUNCER=1, else directly.
	bounceFromEnv bouncing = iota
	// bounceNoListenURL: through a PgBouncer, LISTEN included (no
	// CAIRN_DATABASE_LISTEN_URL).
	bounceNoListenURL
	// bounceNever: directly, whatever CAIRN_E2E_PGBOUNCER says (a multi-host
	// URL, which one PgBouncer cannot stand for).
	bounceNever
)

// newStack prepares a stack. When the test fails, the tail of every server's log is
// printed.
func newStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	cairnBinary(t) // fail early, before a database is made
	st := &stack{t: t, dbURL: opts.dbURL, blobURL: opts.blobURL, env: opts.env, dir: t.TempDir()}
	// Extracted bundles are read-only: make them removable for TempDir's cleanup,
	// which runs after this one.
	t.Cleanup(func() {
		// A server killed while a root server's handlers ran leaves their
		// attempt directories mounted (a tmpfs each).
		st.mu.Lock()
		for _, s := range st.servers {
			_, _ = functions.RemoveLeftoverAttempts(filepath.Join(s.home, "tmp"))
		}
		st.mu.Unlock()
		makeWritable(st.dir)
	})
	if st.dbURL == "" {
		st.dbURL = testenv.DatabaseURL(t)
	}
	st.serverDBURL = st.dbURL
	if opts.pgbouncer == bounceNoListenURL || (opts.pgbouncer == bounceFromEnv && os.Getenv(envPgBouncer) == "1") {
		st.serverDBURL = testenv.PooledURL(t, testenv.PgBouncer(t, st.dbURL), st.dbURL)
		st.env = append(st.env, "CAIRN_DATABASE_POOL_MODE=transaction")
		if opts.pgbouncer != bounceNoListenURL {
			st.env = append(st.env, "CAIRN_DATABASE_LISTEN_URL="+st.dbURL)
		}
	}
	if st.blobURL == "" {
		blobDir := filepath.Join(st.dir, "blobs")
		require.NoError(t, os.MkdirAll(blobDir, 0o755))
		st.blobURL = "file://" + blobDir
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		for _, s := range st.servers {
			t.Logf("log of server %s (pid %d), last %d KiB without request lines:\n%s", s.name, s.pid, logTail>>10, logExcerpt(s.logPath))
		}
	})
	return st
}

// serverOptions tune one `cairn serve` process.
type serverOptions struct {
	// name tells the servers of a test apart in logs; default s1, s2, ….
	name string
	// leaseTTL is CAIRN_LEASE_TTL; default 2s.
	leaseTTL time.Duration
	// inlineLimit is CAIRN_INLINE_LIMIT; 0 keeps the server's default.
	inlineLimit int64
	// shutdownGrace is CAIRN_SHUTDOWN_GRACE; 0 keeps the server's default.
	shutdownGrace time.Duration
	// noDispatcher serves the API only.
	noDispatcher bool
	// env is added to the server's environment.
	env []string
	// binary is the cairn binary to run; default cairnBinary's (this module's).
	binary string
	// uid, when not 0, runs the server as that user (and group): the non-root
	// path of production. Its folders and the stack's file blob store are handed
	// to it.
	uid int
}

// server is a running (or ended) `cairn serve` process.
type server struct {
	t       *testing.T
	name    string
	url     string
	pid     int
	logPath string
	home    string // HOME; its tmp is the server's TMPDIR
	// started is when the process was started, ready when /readyz first answered 200.
	started time.Time
	ready   time.Time

	exited  chan struct{} // closed once the process is reaped
	waitErr error         // the process's end; read after exited is closed
}

// start starts a server and waits until /readyz answers 200. It is killed (and
// reaped) when the test ends.
func (st *stack) start(opts serverOptions) *server {
	st.t.Helper()
	var lastErr error
	// Another process may take the free port between our probe and the server's
	// bind: try a few ports.
	for try := 1; try <= 3; try++ {
		s, err := st.launch(opts)
		require.NoError(st.t, err)
		err = s.waitReady(30 * time.Second)
		if err == nil {
			return s
		}
		lastErr = err
		s.kill()
		if !strings.Contains(tailFile(s.logPath, 4096), "address already in use") {
			break
		}
	}
	st.t.Fatalf("server did not become ready: %v", lastErr)
	return nil
}

// launch starts the process without waiting for it.
func (st *stack) launch(opts serverOptions) (*server, error) {
	st.mu.Lock()
	st.seq++
	n := st.seq
	st.mu.Unlock()
	if opts.name == "" {
		opts.name = "s" + strconv.Itoa(n)
	}
	if opts.leaseTTL == 0 {
		opts.leaseTTL = 2 * time.Second
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(st.dir, fmt.Sprintf("%s-%d", opts.name, n))
	for _, d := range []string{"cache", "tmp"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o755); err != nil {
			return nil, err
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	env := []string{
		"PATH=" + os.Getenv("PATH"),
		"LANG=C.UTF-8",
		"HOME=" + home,
		"TMPDIR=" + filepath.Join(home, "tmp"),
		"CAIRN_LISTEN=" + addr,
		"CAIRN_DATABASE_URL=" + st.serverDBURL,
		"CAIRN_BLOBSTORE=" + st.blobURL,
		"CAIRN_TOKENS=operator:" + operatorToken + ",viewer:" + viewerToken,
		"CAIRN_SIGNING_KEY=" + signingKey,
		"CAIRN_LEASE_TTL=" + opts.leaseTTL.String(),
		"CAIRN_CACHE_DIR=" + filepath.Join(home, "cache"),
		"CAIRN_LOG_LEVEL=debug",
		// The tests' http functions listen on 127.0.0.1.
		"CAIRN_HTTP_ALLOW_LOCAL=true",
		// The engine's tests talk to their handlers through files of the test
		// (gates, ledgers), which a sandbox hides; the sandbox has tests of its own
		// (isolation_test.go, the chaos test), which set bwrap in opts.env.
		"CAIRN_EXEC_ISOLATION=none",
	}
	if opts.inlineLimit > 0 {
		env = append(env, "CAIRN_INLINE_LIMIT="+strconv.FormatInt(opts.inlineLimit, 10))
	}
	if opts.shutdownGrace > 0 {
		env = append(env, "CAIRN_SHUTDOWN_GRACE="+opts.shutdownGrace.String())
	}
	env = append(append(env, st.env...), opts.env...)
	if opts.uid != 0 {
		if err := st.handTo(opts.uid, home); err != nil {
			return nil, err
		}
	}
	args := []string{"serve"}
	if opts.noDispatcher {
		args = append(args, "--no-dispatcher")
	}
	s := &server{
		t:       st.t,
		name:    opts.name,
		url:     "http://" + addr,
		logPath: filepath.Join(st.dir, fmt.Sprintf("%s-%d.log", opts.name, n)),
		home:    home,
		exited:  make(chan struct{}),
	}
	logFile, err := os.Create(s.logPath)
	if err != nil {
		return nil, err
	}
	bin := opts.binary
	if bin == "" {
		bin = cairnBinary(st.t)
	}
	started := make(chan error, 1)
	// The process is started and waited for from a goroutine locked to its OS
	// thread: Linux sends the parent-death signal when the thread that started the
	// child exits, so the thread must live as long as the child. The signal kills
	// servers left behind by a test binary that dies.
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		defer logFile.Close()
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		cmd.Dir = home
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		// A process group of its own, so that signals to the test's group do not
		// reach it. Exec handlers get groups of their own from the dispatcher.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if opts.uid != 0 {
			cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(opts.uid), Gid: uint32(opts.uid)}
		}
		s.started = time.Now()
		if err := cmd.Start(); err != nil {
			started <- err
			close(s.exited)
			return
		}
		s.pid = cmd.Process.Pid
		started <- nil
		s.waitErr = cmd.Wait()
		close(s.exited)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start cairn serve: %w", err)
	}
	st.mu.Lock()
	st.servers = append(st.servers, s)
	st.mu.Unlock()
	st.t.Cleanup(s.kill)
	return s, nil
}

// waitReady polls /readyz every 10 ms until it answers 200, the process exits or
// timeout passes, and records when it first answered.
func (s *server) waitReady(timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := client.Get(s.url + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				s.ready = time.Now()
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		select {
		case <-s.exited:
			return fmt.Errorf("server %s exited before it was ready: %v", s.name, s.waitErr)
		case <-deadline.C:
			return fmt.Errorf("server %s not ready after %s (last: %v)", s.name, timeout, err)
		case <-tick.C:
		}
	}
}

// readyz returns the status code of GET /readyz (0 when it does not answer).
func (s *server) readyz() int {
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get(s.url + "/readyz")
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func (s *server) hasExited() bool {
	select {
	case <-s.exited:
		return true
	default:
		return false
	}
}

// signal sends sig to the server process.
func (s *server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.hasExited() {
		return
	}
	err := syscall.Kill(s.pid, sig)
	if err != nil && !errors.Is(err, syscall.ESRCH) {
		s.t.Fatalf("signal %s to server %s: %v", sig, s.name, err)
	}
}

// kill sends SIGKILL to the server and its process group and waits until it is
// reaped. Safe to call more than once, and on a frozen server.
func (s *server) kill() {
	if s.pid == 0 || s.hasExited() {
		<-s.exited
		return
	}
	_ = syscall.Kill(-s.pid, syscall.SIGKILL)
	_ = syscall.Kill(s.pid, syscall.SIGKILL)
	<-s.exited
}

// freeze stops the process (SIGSTOP): a dispatcher that is alive but does nothing,
// like one stuck in a long GC pause or on a suspended VM.
func (s *server) freeze() { s.signal(syscall.SIGSTOP) }

// thaw resumes a frozen process (SIGCONT).
func (s *server) thaw() { s.signal(syscall.SIGCONT) }

// stop sends SIGTERM and waits for a graceful exit.
func (s *server) stop(timeout time.Duration) {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(timeout):
		s.t.Fatalf("server %s did not exit within %s of SIGTERM", s.name, timeout)
	}
	require.NoError(s.t, s.waitErr, "server %s exit after SIGTERM", s.name)
}

// owns reports whether an attempt's dispatcher name is this server's dispatcher
// (names are host-pid-random).
func (s *server) owns(dispatcher string) bool {
	parts := strings.Split(dispatcher, "-")
	return len(parts) >= 3 && parts[len(parts)-2] == strconv.Itoa(s.pid)
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes.
func (s *server) peakRSS() int64 {
	s.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	require.NoError(s.t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			require.NoError(s.t, err)
			return kb << 10
		}
	}
	s.t.Fatalf("no VmHWM in /proc/%d/status", s.pid)
	return 0
}

// metric returns the sum of every series of a Prometheus metric on /metrics, and the
// series lines themselves.
func (s *server) metric(name string) (float64, []string) {
	s.t.Helper()
	resp, err := http.Get(s.url + "/metrics")
	require.NoError(s.t, err)
	defer resp.Body.Close()
	require.Equal(s.t, http.StatusOK, resp.StatusCode)
	var sum float64
	var lines []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		require.NoError(s.t, err, "metric line %q", line)
		sum += v
		lines = append(lines, line)
	}
	require.NoError(s.t, sc.Err())
	return sum, lines
}

// api returns a client of the server with the operator token.
func (s *server) api() *apiClient {
	return newAPIClient(s.t, s.url)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailFile returns the last n bytes of a file, or why it cannot.
func tailFile(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(fi.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, n))
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// logExcerpt returns the end of a server's log without its debug lines about API
// requests (the tests poll a lot), at most logTail bytes.
func logExcerpt(path string) string {
	var keep []string
	for _, line := range strings.Split(tailFile(path, 8*logTail), "\n") {
		if strings.Contains(line, "level=DEBUG msg=request ") {
			continue
		}
		keep = append(keep, line)
	}
	s := strings.Join(keep, "\n")
	if len(s) > logTail {
		s = s[len(s)-logTail:]
	}
	return s
}

// makeWritable adds the owner's write permission to every directory under root.
func makeWritable(root string) {
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
}

// processGone reports whether pid has exited (or is a zombie nobody reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name: "pid (comm) S …".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// withTimeout returns a context for one helper operation.
func withTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}

// handTo lets uid run a server in home: it owns home and the stack's file blob
// store, and can reach them and the binary.
func (st *stack) handTo(uid int, home string) error {
	chownAll := func(root string) error {
		return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, uid)
		})
	}
	if err := chownAll(home); err != nil {
		return err
	}
	if blobs, ok := strings.CutPrefix(st.blobURL, "file://"); ok {
		if err := chownAll(blobs); err != nil {
			return err
		}
	}
	// Every folder above home and the binary must be walkable by uid.
	for _, p := range []string{home, filepath.Dir(cairnBinary(st.t))} {
		for d := filepath.Dir(p); d != "/"; d = filepath.Dir(d) {
			info, err := os.Stat(d)
			if err != nil {
				return err
			}
			if info.Mode().Perm()&0o001 == 0 {
				if err := os.Chmod(d, info.Mode().Perm()|0o011); err != nil {
					return err
				}
			}
		}
	}
	bin := cairnBinary(st.t)
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		return err
	}
	return nil
}
