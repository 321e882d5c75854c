package pglocal

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Defaults of [Config].
const (
	// DefaultUser is the superuser role initdb creates when Config.User is empty.
	// Its password is in the data directory ([PasswordFileName]).
	DefaultUser = "cairn"
	// DefaultStartTimeout bounds how long a start waits for the server to
	// accept connections when Config.StartTimeout is zero. Crash recovery of
	// a large WAL backlog can take that long.
	DefaultStartTimeout = time.Minute
)

// defaultSettings are passed to postgres unless Config.Settings overrides
// them. fsync stays on: a cluster that loses committed data on a power cut
// is only acceptable for tests, which opt out explicitly.
func defaultSettings() map[string]string {
	return map[string]string{
		"max_connections":   "200",
		"shared_buffers":    "128MB",
		"logging_collector": "off", // the log is postgres' stderr, in <DataDir>/postgres.log
	}
}

// reservedSetting explains why a setting cannot be given in Config.Settings:
// the server listens on 127.0.0.1:Port only and keeps its socket and
// configuration in the data directory.
func reservedSetting(name string) (why string, reserved bool) {
	switch name {
	case "port":
		return "use Config.Port", true
	case "listen_addresses":
		return "the cluster listens on 127.0.0.1 only", true
	case "unix_socket_directories":
		return "the socket lives in the data directory", true
	case "data_directory":
		return "use Config.DataDir", true
	case "config_file", "hba_file", "ident_file":
		return "the cluster uses the files in its data directory", true
	case "password_encryption":
		return "passwords are stored as SCRAM-SHA-256 verifiers, the only kind the cluster accepts", true
	}
	return "", false
}

// Config describes a cluster for [Start]. The zero value of every field but
// DataDir is usable.
type Config struct {
	// DataDir is the cluster's data directory (required). It is created if
	// missing and initialized with initdb if empty; a directory that already
	// holds a cluster is reused with its data. A non-empty directory without
	// a cluster is an error. Relative paths are made absolute.
	DataDir string

	// Port is the TCP port on 127.0.0.1. Zero picks a free port; the chosen
	// port is kept by [Cluster.Stop] and [Cluster.Start], so a restarted
	// cluster answers at the same URL.
	Port int

	// BinDir is the directory holding initdb and postgres. When empty, the
	// search order is: $CAIRN_PG_BIN ([EnvBinDir]), `pg_config --bindir`,
	// the highest version under /usr/lib/postgresql/*/bin, then PATH.
	BinDir string

	// Settings are extra server settings (postgresql.conf names), passed on
	// the postgres command line, so they win over postgresql.conf. They are
	// merged over the defaults max_connections=200, shared_buffers=128MB and
	// logging_collector=off. Setting fsync=off also makes initdb skip its
	// final sync. port, listen_addresses, unix_socket_directories,
	// data_directory, config_file, hba_file, ident_file and password_encryption
	// are rejected: the cluster chooses those.
	Settings map[string]string

	// Logger receives the cluster's own events (start, stop, left-over
	// state). The server's log goes to <DataDir>/postgres.log instead.
	// Default: discard.
	Logger *slog.Logger

	// User is the database superuser created by initdb, used in [Cluster.URL].
	// Default [DefaultUser]. For a reused data directory it must name the
	// superuser it was initialized with. It logs in with a password, like every
	// role: see the package documentation.
	User string

	// Getenv reads the environment for binary discovery ($CAIRN_PG_BIN,
	// $PATH). Default os.Getenv.
	Getenv func(string) string

	// DieWithParent asks the kernel to send the postmaster SIGQUIT (an
	// immediate shutdown, which also ends its backends) when the calling
	// process dies, however it dies. Tests use it so that a cluster never
	// outlives its test binary; `cairn dev` leaves it off and stops its
	// cluster in order. The signal is tied to the OS thread that started the
	// server, so the cluster keeps a locked thread per running server.
	DieWithParent bool

	// Replication lets the superuser open replication connections from
	// 127.0.0.1 (with its password), for a standby made by [Cluster.Standby].
	// Default off: pg_hba.conf refuses replication connections.
	Replication bool

	// StartTimeout bounds each start, from spawning postgres to accepting
	// connections, in addition to the caller's context. Default
	// [DefaultStartTimeout].
	StartTimeout time.Duration
}

// normalize validates cfg and fills in defaults.
func (cfg Config) normalize() (Config, error) {
	if cfg.DataDir == "" {
		return cfg, fmt.Errorf("config: DataDir is required")
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return cfg, fmt.Errorf("config: DataDir %s: %w", cfg.DataDir, err)
	}
	cfg.DataDir = dir
	if cfg.Port < 0 || cfg.Port > 65535 {
		return cfg, fmt.Errorf("config: Port %d out of range 0-65535", cfg.Port)
	}
	if cfg.User == "" {
		cfg.User = DefaultUser
	}
	if cfg.Getenv == nil {
		cfg.Getenv = os.Getenv
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = DefaultStartTimeout
	}
	settings := defaultSettings()
	for name, value := range cfg.Settings {
		key := strings.ToLower(strings.TrimSpace(name))
		if why, ok := reservedSetting(key); ok {
			return cfg, fmt.Errorf("config: setting %s is reserved: %s", name, why)
		}
		if key == "" || strings.ContainsAny(key, "= \t\n") {
			return cfg, fmt.Errorf("config: invalid setting name %q", name)
		}
		settings[key] = value
	}
	cfg.Settings = settings
	return cfg, nil
}
