package pglocal

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/lib/pq"
)

// Standby copies the running cluster c (started with Config.Replication) into
// cfg.DataDir with pg_basebackup -R, a streaming replica that follows c, and
// starts it with cfg (its DataDir must be missing or empty; its User is c's
// superuser, whose password the copy keeps). The standby answers reads only
// until [Cluster.Promote]. Its Replication follows c's.
func (c *Cluster) Standby(ctx context.Context, cfg Config) (*Cluster, error) {
	cfg.User = c.cfg.User
	cfg.Replication = c.cfg.Replication
	if err := makeDataDir(cfg.DataDir, c.acct != nil); err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	if c.acct != nil {
		if err := c.acct.chownTree(cfg.DataDir); err != nil {
			return nil, fmt.Errorf("standby: %w", err)
		}
	}
	// --checkpoint=fast: the copy starts at once rather than at the next
	// scheduled checkpoint; -X stream: the WAL written meanwhile comes along.
	cmd := exec.CommandContext(ctx, filepath.Join(c.bins.dir, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", c.cfg.User,
		"-D", cfg.DataDir, "-R", "-X", "stream", "--checkpoint=fast", "--no-password")
	cmd.Env = append(childEnv(), "PGPASSWORD="+c.password)
	if c.acct != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.acct.credential()}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("standby: pg_basebackup: %w: %s", err, lastLines(out, 20))
	}
	if err := os.Chmod(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	return Start(ctx, cfg)
}

// Promote makes a standby (see [Cluster.Standby]) a primary and waits until it
// takes writes.
func (c *Cluster) Promote(ctx context.Context) error {
	return c.withDB(ctx, "postgres", func(db *sql.DB) error {
		var ok bool
		if err := db.QueryRowContext(ctx, `SELECT pg_promote(true, 60)`).Scan(&ok); err != nil {
			return fmt.Errorf("promote: %w", err)
		}
		if !ok {
			return fmt.Errorf("promote: the standby was not promoted within 60 s")
		}
		return nil
	})
}

// SetSetting sets a server setting with ALTER SYSTEM and reloads the
// configuration: for settings a running cluster takes at a reload
// (synchronous_standby_names, say). A setting given in Config.Settings wins over
// it (it is on the command line).
func (c *Cluster) SetSetting(ctx context.Context, name, value string) error {
	return c.withDB(ctx, "postgres", func(db *sql.DB) error {
		if _, err := db.ExecContext(ctx, fmt.Sprintf("ALTER SYSTEM SET %s = %s", pq.QuoteIdentifier(name), pq.QuoteLiteral(value))); err != nil {
			return fmt.Errorf("set %s: %w", name, err)
		}
		if _, err := db.ExecContext(ctx, `SELECT pg_reload_conf()`); err != nil {
			return fmt.Errorf("reload the configuration: %w", err)
		}
		return nil
	})
}
