// Package pgserver starts a private PostgreSQL cluster for the benchmark from the
// installed server binaries: initdb on a fresh directory, then the postmaster as a
// direct child listening on 127.0.0.1 only. It is a minimal cousin of the main
// module's internal/pglocal, which another module may not import. As root, initdb and
// postgres run as the "postgres" account (they refuse to run as root).
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cairnrun/cairn/bench/internal/proc"
)

// User is the superuser role initdb creates; authentication is trust.
const User = "bench"

// Config describes a cluster.
type Config struct {
	// DataDir is created and initialized; it must not exist yet or be empty.
	DataDir string
	// BinDir holds initdb and postgres; default the highest
	// /usr/lib/postgresql/*/bin, then `pg_config --bindir`.
	BinDir string
	// Settings are passed as -c name=value.
	Settings map[string]string
}

// Server is a running cluster.
type Server struct {
	BinDir  string
	DataDir string
	Port    int
	child   *proc.Child
}

// FindBinDir returns the directory of the PostgreSQL server programs.
func FindBinDir() (string, error) {
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	major := func(dir string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(dir)), 64)
		return v
	}
	sort.Slice(matches, func(i, j int) bool { return major(matches[i]) > major(matches[j]) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		matches = append(matches, strings.TrimSpace(string(out)))
	}
	for _, dir := range matches {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries (postgres, initdb) under /usr/lib/postgresql/*/bin or pg_config --bindir: install postgresql")
}

// Start initializes cfg.DataDir and starts the server, returning once it accepts
// connections. The server gets SIGQUIT (an immediate shutdown) if the benchmark dies.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	bin := cfg.BinDir
	if bin == "" {
		var err error
		if bin, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root: PostgreSQL must run as the postgres account: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	if cred != nil {
		if err := os.Chown(cfg.DataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("chown data dir: %w", err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", cfg.DataDir,
		"--auth=trust", "-U", User, "-E", "UTF8", "--locale=C")
	initdb.Dir = "/"
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("initdb %s: %w: %s", cfg.DataDir, err, out)
	}

	addr, err := proc.FreeAddr()
	if err != nil {
		return nil, err
	}
	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	args := []string{"-D", cfg.DataDir, "-p", portText,
		"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=" + cfg.DataDir}
	names := make([]string, 0, len(cfg.Settings))
	for n := range cfg.Settings {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		args = append(args, "-c", n+"="+cfg.Settings[n])
	}
	logPath := filepath.Join(cfg.DataDir, "postgres.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	if cred != nil {
		_ = logFile.Chown(int(cred.Uid), int(cred.Gid))
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Dir = cfg.DataDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	child, err := proc.Start(cmd, syscall.SIGQUIT)
	if err != nil {
		return nil, err
	}
	s := &Server{BinDir: bin, DataDir: cfg.DataDir, Port: port, child: child}
	deadline := time.Now().Add(time.Minute)
	for {
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			conn.Close(ctx)
			return s, nil
		}
		if child.Exited() || time.Now().After(deadline) || ctx.Err() != nil {
			child.Kill()
			return nil, fmt.Errorf("postgres did not start: %v; log:\n%s", err, proc.TailFile(logPath, 4096))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL returns the connection URL of database db as the superuser.
func (s *Server) URL(db string) string { return s.URLAs(User, db) }

// URLAs returns the connection URL of database db as role.
func (s *Server) URLAs(role, db string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", role, s.Port, db)
}

// Pid returns the postmaster's process id.
func (s *Server) Pid() int { return s.child.Pid }

// CPUSeconds returns the processor time the cluster has used so far (the
// postmaster, its exited backends and its live ones).
func (s *Server) CPUSeconds() float64 { return proc.TreeCPU(s.child.Pid) }

// CreateDatabase creates database name.
func (s *Server) CreateDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// Stop shuts the server down: a fast shutdown, or an immediate one (SIGQUIT, which
// also ends the backends) when that takes over 30 s.
func (s *Server) Stop() {
	_ = s.child.Signal(syscall.SIGINT)
	select {
	case <-s.child.Done():
		return
	case <-time.After(30 * time.Second):
	}
	s.child.Stop(syscall.SIGQUIT, 10*time.Second)
}
