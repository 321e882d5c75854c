package pglocal

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lib/pq"
)

const (
	// logFileName is the server's log inside the data directory.
	logFileName = "postgres.log"
	// logRotateSize: a log larger than this at start is moved to
	// postgres.log.1 (replacing the previous one), so a long-lived dev
	// data directory does not grow without bound.
	logRotateSize = 16 << 20
	// immediateTimeout is how long a server gets for an immediate shutdown
	// (SIGQUIT) before SIGKILL, when a fast shutdown ran out of time.
	immediateTimeout = 5 * time.Second
	// maxPortAttempts bounds the retries when a port picked for Port 0 is
	// taken by someone else between picking and binding.
	maxPortAttempts = 3
)

// errPortInUse marks a server that exited at start because its port was
// taken.
var errPortInUse = errors.New("port in use")

// Cluster is a running (or stopped) private PostgreSQL cluster. Its methods
// are safe for concurrent use. Start and Stop serialize with each other; URL,
// Port and DataDir never block.
type Cluster struct {
	cfg     Config // normalized
	dataDir string // resolved
	port    int    // fixed once Start returns
	bins    binaries
	acct    *account // nil: run as ourselves
	logger  *slog.Logger
	// password is the superuser's, fixed once Start returns (see ensureAuth).
	password string

	mu   sync.Mutex
	proc *process // nil when stopped
}

// process is one postmaster, our child.
type process struct {
	pid  int
	done chan struct{} // closed once the postmaster exited and was reaped
	err  error         // exec.Cmd.Wait's result; read only after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Start finds the PostgreSQL binaries, prepares cfg.DataDir (see [Config]),
// clears left-over state of an earlier owner (see the package documentation),
// starts the server and returns once it accepts connections.
//
// It returns an error wrapping [ErrNoBinaries] when no binaries are found, an
// error naming the directory when (as root) the server's account cannot reach
// the data directory, and an error quoting the server's log when the server
// exits or does not accept connections within cfg.StartTimeout or before ctx
// is done. The server keeps running after ctx is done; stop it with
// [Cluster.Stop].
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg, err := cfg.normalize()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	logger := cfg.Logger.With("component", "pglocal")
	bins, err := findBinaries(ctx, cfg.BinDir, cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	var acct *account
	if os.Geteuid() == 0 {
		if acct, err = lookupOrCreateAccount(ctx); err != nil {
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	}
	dataDir, err := prepareDataDir(ctx, cfg, bins, acct, logger.Info)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	c := &Cluster{cfg: cfg, dataDir: dataDir, port: cfg.Port, bins: bins, acct: acct, logger: logger}
	if err := c.start(ctx, cfg.Port == 0); err != nil {
		return nil, err
	}
	return c, nil
}

// Start starts the server again after [Cluster.Stop] or [Cluster.Kill], on
// the same data directory and port, clearing left-over state first, and
// returns once it accepts connections. It returns nil at once when the server
// is running. Errors are those of the package-level [Start]; a port taken in
// the meantime is an error, since callers rely on the URL staying the same.
func (c *Cluster) Start(ctx context.Context) error {
	return c.start(ctx, false)
}

func (c *Cluster) start(ctx context.Context, pickPort bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil && !c.proc.exited() {
		return nil
	}
	c.proc = nil

	ctx, cancel := context.WithTimeout(ctx, c.cfg.StartTimeout)
	defer cancel()
	if err := reclaim(ctx, c.dataDir, c.logger.Info); err != nil {
		return fmt.Errorf("start postgres in %s: %w", c.dataDir, err)
	}
	if err := c.ensureAuth(ctx); err != nil {
		return fmt.Errorf("start postgres in %s: %w", c.dataDir, err)
	}
	for attempt := 1; ; attempt++ {
		port := c.port
		if pickPort {
			var err error
			if port, err = freePort(); err != nil {
				return fmt.Errorf("start postgres: %w", err)
			}
		}
		p, err := c.spawn(port)
		if err == nil {
			err = c.waitReady(ctx, p, port)
			if err != nil {
				c.killProcess(p)
			}
		}
		if err == nil {
			if pickPort {
				c.port = port // only before Start returns the Cluster: Port reads it unlocked
			}
			c.proc = p
			c.logger.Info("postgres ready", "port", port, "pid", p.pid, "data_dir", c.dataDir)
			return nil
		}
		if pickPort && errors.Is(err, errPortInUse) && attempt < maxPortAttempts {
			c.logger.Info("picked port was taken, trying another", "port", port)
			continue
		}
		return fmt.Errorf("start postgres in %s: %w", c.dataDir, err)
	}
}

// spawn starts the postmaster. Its stdout and stderr go to the log file.
func (c *Cluster) spawn(port int) (*process, error) {
	logFile, err := c.openLog()
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child has its own descriptor

	// Not exec.CommandContext: the server outlives the start's context.
	cmd := exec.Command(c.bins.postgres, c.serverArgs(port)...)
	cmd.Dir = c.dataDir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Own process group: a terminal's Ctrl-C goes to the parent, which then
	// stops the server in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if c.acct != nil {
		cmd.SysProcAttr.Credential = c.acct.credential()
	}
	if c.cfg.DieWithParent {
		// SIGQUIT: an immediate shutdown that also takes down the backends,
		// which SIGKILL of the postmaster alone would leave behind.
		setDeathSignal(cmd.SysProcAttr, syscall.SIGQUIT)
	}

	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		if c.cfg.DieWithParent {
			// The kernel sends Pdeathsig when the thread that forked the
			// child exits, not the process, and Go may retire idle threads.
			// Pin this goroutine to its thread and keep it there until the
			// server has exited; returning while locked ends the thread.
			runtime.LockOSThread()
		}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		c.logger.Debug("postgres exited", "pid", p.pid, "error", p.err)
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("run %s: %w", c.bins.postgres, err)
	}
	return p, nil
}

// serverArgs returns the postgres command line after the program name.
func (c *Cluster) serverArgs(port int) []string {
	sockDir := c.dataDir
	// A Unix socket path is limited to 107 bytes; beyond that, go without
	// the socket (everything here uses TCP) instead of failing.
	if len(filepath.Join(sockDir, ".s.PGSQL."+strconv.Itoa(port))) > 107 {
		c.logger.Info("data dir path too long for a Unix socket; TCP only", "data_dir", c.dataDir)
		sockDir = ""
	}
	args := []string{"-D", c.dataDir, "-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + sockDir}
	return append(args, c.settingArgs()...)
}

// settingArgs returns Config.Settings as -c options, sorted, and the settings
// the cluster always has: passwords are stored as SCRAM-SHA-256 verifiers, the
// only kind pg_hba.conf accepts (PostgreSQL before 14 stored MD5 by default).
func (c *Cluster) settingArgs() []string {
	names := make([]string, 0, len(c.cfg.Settings))
	for name := range c.cfg.Settings {
		names = append(names, name)
	}
	sort.Strings(names)
	var args []string
	for _, name := range names {
		args = append(args, "-c", name+"="+c.cfg.Settings[name])
	}
	return append(args, "-c", "password_encryption=scram-sha-256")
}

// openLog opens the server log for appending, rotating it when large.
func (c *Cluster) openLog() (*os.File, error) {
	path := c.LogFile()
	if fi, err := os.Stat(path); err == nil && fi.Size() > logRotateSize {
		_ = os.Rename(path, path+".1")
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open postgres log: %w", err)
	}
	if c.acct != nil {
		_ = f.Chown(int(c.acct.uid), int(c.acct.gid))
	}
	return f, nil
}

// waitReady polls until the server p accepts connections on port, p exits,
// or ctx is done. A server answering on the port only counts when
// postmaster.pid names p: otherwise it may be someone else's.
func (c *Cluster) waitReady(ctx context.Context, p *process, port int) error {
	logStart := c.logSize()
	db, err := sql.Open("postgres", c.urlFor(port, "postgres")+"&connect_timeout=5")
	if err != nil {
		return fmt.Errorf("open connection: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)

	pidPath := filepath.Join(c.dataDir, pidFileName)
	delay := 10 * time.Millisecond
	for {
		pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := db.PingContext(pingCtx)
		cancel()
		if err == nil {
			if pid, _ := readPidFile(pidPath); pid == p.pid {
				return nil
			}
		}
		var pqErr *pq.Error
		switch {
		case errors.As(err, &pqErr) && pqErr.Code == "28P01":
			// Waiting won't help: the password was refused.
			return fmt.Errorf("connect as %s: %w (the password in %s is not the superuser's: remove the file, "+
				"and the next start sets a new one)", c.cfg.User, err, c.PasswordFile())
		case errors.As(err, &pqErr) && (pqErr.Code.Class() == "28" || pqErr.Code.Class() == "3D"):
			// Waiting won't help: the role or database does not exist.
			return fmt.Errorf("connect as %s: %w (was the data dir initialized with another Config.User?)", c.cfg.User, err)
		}
		select {
		case <-p.done:
			return c.exitError(p, port, logStart)
		case <-ctx.Done():
			return fmt.Errorf("wait for postgres to accept connections on port %d: %w (last error: %v); log:\n%s",
				port, ctx.Err(), err, c.logSince(logStart))
		case <-time.After(delay):
		}
		delay = min(delay*2, 200*time.Millisecond)
	}
}

// exitError explains why p exited during startup.
func (c *Cluster) exitError(p *process, port int, logStart int64) error {
	log := c.logSince(logStart)
	// lc_messages is C (initdb --locale=C), so the wording is stable.
	if strings.Contains(log, "could not bind") || strings.Contains(log, "could not create any TCP/IP sockets") {
		return fmt.Errorf("postgres cannot listen on 127.0.0.1:%d: %w; log:\n%s", port, errPortInUse, log)
	}
	return fmt.Errorf("postgres exited during startup (%v); log:\n%s", p.err, log)
}

func (c *Cluster) logSize() int64 {
	fi, err := os.Stat(c.LogFile())
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logSince returns the log written after offset, at most its last 4 KiB.
func (c *Cluster) logSince(offset int64) string {
	const maxTail = 4 << 10
	f, err := os.Open(c.LogFile())
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", c.LogFile(), err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size()-offset > maxTail {
		offset = fi.Size() - maxTail
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, offset, maxTail))
	return lastLines(b, 40)
}

// Stop shuts the server down and waits for it to exit: a fast shutdown
// (clients are disconnected, transactions rolled back, a checkpoint written).
// When ctx is done first, it falls back to an immediate shutdown and then
// SIGKILL, waits for that, and returns ctx's error. Stopping a stopped
// cluster returns nil. The data directory and port are kept for
// [Cluster.Start].
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	c.proc = nil
	if p == nil || p.exited() {
		return nil
	}
	if err := syscall.Kill(p.pid, syscall.SIGINT); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("stop postgres %d: %w", p.pid, err)
	}
	select {
	case <-p.done:
		c.logger.Info("postgres stopped", "pid", p.pid)
		return nil
	case <-ctx.Done():
	}
	c.logger.Info("postgres fast shutdown ran out of time; shutting down immediately", "pid", p.pid)
	_ = syscall.Kill(p.pid, syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(immediateTimeout):
		c.killProcess(p)
	}
	return fmt.Errorf("stop postgres %d: fast shutdown: %w", p.pid, ctx.Err())
}

// Kill simulates a crash: SIGKILL to the postmaster and to every server
// process of the data directory, without a shutdown checkpoint, leaving a
// stale postmaster.pid behind. It returns once they are gone. The next
// [Cluster.Start] runs crash recovery. Killing a stopped cluster is a no-op.
func (c *Cluster) Kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.proc
	c.proc = nil
	if p == nil {
		return nil
	}
	c.killProcess(p)
	return nil
}

// killProcess SIGKILLs p, waits for it, then SIGKILLs the backends it left:
// each postgres child is a session leader of its own, so they are not in the
// postmaster's process group.
func (c *Cluster) killProcess(p *process) {
	_ = syscall.Kill(p.pid, syscall.SIGKILL)
	<-p.done
	if pids, err := serverProcessesOf(c.dataDir); err == nil {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		waitGone(context.Background(), pids, immediateTimeout)
	}
}

// URL returns the lib/pq connection URL of database dbname as the superuser,
// with its password, e.g.
// postgres://cairn:<password>@127.0.0.1:5432/dbname?sslmode=disable. It stays
// valid across Stop and Start.
func (c *Cluster) URL(dbname string) string {
	return c.urlFor(c.port, dbname)
}

func (c *Cluster) urlFor(port int, dbname string) string {
	return roleURL(port, dbname, c.cfg.User, c.password)
}

// RoleURL returns the lib/pq connection URL of database dbname as role with
// password (see [Cluster.CreateRole]). It stays valid across Stop and Start.
func (c *Cluster) RoleURL(dbname, role, password string) string {
	return roleURL(c.port, dbname, role, password)
}

func roleURL(port int, dbname, role, password string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(role, password),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port on 127.0.0.1 the server listens on.
func (c *Cluster) Port() int { return c.port }

// DataDir returns the data directory, absolute, with symbolic links resolved.
func (c *Cluster) DataDir() string { return c.dataDir }

// LogFile returns the path of the server's log (its stdout and stderr).
func (c *Cluster) LogFile() string { return filepath.Join(c.dataDir, logFileName) }

// freePort asks the kernel for a free TCP port on 127.0.0.1. Another process
// may take it before postgres binds it; start retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
