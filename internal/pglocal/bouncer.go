package pglocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoBouncer means no pgbouncer binary was found (Debian: apt-get install
// pgbouncer; `make tools` installs it).
var ErrNoBouncer = errors.New("no pgbouncer binary: install it (Debian/Ubuntu: apt-get install pgbouncer, or `make tools`)")

// BouncerConfig describes a PgBouncer in front of a PostgreSQL server.
type BouncerConfig struct {
	// Dir holds the bouncer's configuration, auth file and log; it must exist
	// and be empty or the bouncer's own. Required.
	Dir string
	// Target is the PostgreSQL server's host:port. Required.
	Target string
	// Users maps each role clients log in as to its password: the bouncer
	// checks clients against it (SCRAM) and logs in to the server with it.
	Users map[string]string
	// PoolMode is PgBouncer's pool_mode; default "transaction".
	PoolMode string
	// PoolSize is default_pool_size: server connections per database and
	// role; default 20.
	PoolSize int
	// DieWithParent kills the bouncer when the process that started it exits.
	DieWithParent bool
}

// Bouncer is a running PgBouncer, our child, listening on 127.0.0.1.
type Bouncer struct {
	cfg  BouncerConfig
	port int
	acct *account

	target string
	pid    int
	done   chan struct{}
}

// StartBouncer writes cfg's configuration and starts pgbouncer on a free port
// of 127.0.0.1, and returns once it accepts connections. As root it runs as
// the account PostgreSQL runs as (pgbouncer refuses root). It returns an error
// wrapping ErrNoBouncer when pgbouncer is not installed.
func StartBouncer(ctx context.Context, cfg BouncerConfig) (*Bouncer, error) {
	bin := lookPath("pgbouncer", append(filepath.SplitList(os.Getenv("PATH")), "/usr/sbin", "/usr/local/sbin"))
	if bin == "" {
		return nil, ErrNoBouncer
	}
	if cfg.Dir == "" || cfg.Target == "" {
		return nil, errors.New("start pgbouncer: Dir and Target are required")
	}
	if cfg.PoolMode == "" {
		cfg.PoolMode = "transaction"
	}
	if cfg.PoolSize <= 0 {
		cfg.PoolSize = 20
	}
	b := &Bouncer{cfg: cfg, target: cfg.Target, done: make(chan struct{})}
	if os.Geteuid() == 0 {
		acct, err := lookupOrCreateAccount(ctx)
		if err != nil {
			return nil, fmt.Errorf("start pgbouncer: %w", err)
		}
		b.acct = acct
	}
	port, err := freePort()
	if err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	b.port = port
	if err := b.writeFiles(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	logFile, err := os.OpenFile(b.LogFile()+".out", os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, b.iniPath())
	cmd.Dir = cfg.Dir
	cmd.Env = childEnv()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if b.acct != nil {
		cmd.SysProcAttr.Credential = b.acct.credential()
	}
	if cfg.DieWithParent {
		setDeathSignal(cmd.SysProcAttr, syscall.SIGKILL)
	}
	started := make(chan error, 1)
	go func() {
		if cfg.DieWithParent {
			runtime.LockOSThread() // see Cluster.spawn: the death signal follows the thread
		}
		if err := cmd.Start(); err != nil {
			started <- err
			close(b.done)
			return
		}
		b.pid = cmd.Process.Pid
		started <- nil
		_ = cmd.Wait()
		close(b.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("run %s: %w", bin, err)
	}
	if err := b.waitReady(ctx); err != nil {
		_ = b.Stop()
		return nil, err
	}
	return b, nil
}

// Port is the port the bouncer listens on, on 127.0.0.1.
func (b *Bouncer) Port() int { return b.port }

// LogFile is the bouncer's log.
func (b *Bouncer) LogFile() string { return filepath.Join(b.cfg.Dir, "pgbouncer.log") }

// URL is dbURL (a postgres:// URL of the target server) through the bouncer:
// the same role, password, database and options, at the bouncer's address.
func (b *Bouncer) URL(dbURL string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("parse database URL: %w", err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	return u.String(), nil
}

// Stop ends the bouncer (SIGINT: a fast shutdown) and waits for it, killing it
// after five seconds. Safe to call twice.
func (b *Bouncer) Stop() error {
	if b.pid == 0 {
		return nil
	}
	_ = syscall.Kill(b.pid, syscall.SIGINT)
	select {
	case <-b.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(b.pid, syscall.SIGKILL)
		<-b.done
	}
	return nil
}

func (b *Bouncer) iniPath() string { return filepath.Join(b.cfg.Dir, "pgbouncer.ini") }

// writeFiles writes pgbouncer.ini and the auth file, owned by the bouncer's
// account.
func (b *Bouncer) writeFiles() error {
	host, port, err := net.SplitHostPort(b.target)
	if err != nil {
		return fmt.Errorf("pgbouncer target %q: %w", b.target, err)
	}
	users := make([]string, 0, len(b.cfg.Users))
	for name := range b.cfg.Users {
		users = append(users, name)
	}
	sort.Strings(users)
	var auth strings.Builder
	for _, name := range users {
		fmt.Fprintf(&auth, "%q %q\n", name, b.cfg.Users[name])
	}
	// Every database of the target, reached with the client's role and the
	// password of the auth file. lib/pq sends extra_float_digits at start-up,
	// which PgBouncer does not pass on unless told to ignore it.
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = scram-sha-256
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
logfile = %s
pidfile = %s
`, host, port, b.port, filepath.Join(b.cfg.Dir, "users.txt"), b.cfg.PoolMode, b.cfg.PoolSize,
		b.LogFile(), filepath.Join(b.cfg.Dir, "pgbouncer.pid"))
	for name, data := range map[string]string{"users.txt": auth.String(), "pgbouncer.ini": ini} {
		path := filepath.Join(b.cfg.Dir, name)
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			return err
		}
	}
	if b.acct != nil {
		return b.acct.chownTree(b.cfg.Dir)
	}
	return nil
}

// waitReady waits until the bouncer accepts TCP connections.
func (b *Bouncer) waitReady(ctx context.Context) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-b.done:
			log, _ := os.ReadFile(b.LogFile() + ".out")
			log2, _ := os.ReadFile(b.LogFile())
			return fmt.Errorf("pgbouncer exited at start; log:\n%s%s", log, log2)
		case <-ctx.Done():
			return fmt.Errorf("wait for pgbouncer on %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
