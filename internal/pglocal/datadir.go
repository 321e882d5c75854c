package pglocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// prepareDataDir creates the data directory if needed, initializes it with
// initdb when it is empty, checks that an existing cluster matches the
// binaries, and (as root) hands it to the account. It returns the directory
// with symbolic links resolved, which is what the server's processes report
// as their working directory.
func prepareDataDir(ctx context.Context, cfg Config, bins binaries, acct *account, log func(string, ...any)) (string, error) {
	if err := makeDataDir(cfg.DataDir, acct != nil); err != nil {
		return "", err
	}
	dataDir, err := filepath.EvalSymlinks(cfg.DataDir)
	if err != nil {
		return "", fmt.Errorf("resolve data dir %s: %w", cfg.DataDir, err)
	}
	if acct != nil {
		if err := acct.checkTraverse(dataDir); err != nil {
			return "", err
		}
	}

	versionPath := filepath.Join(dataDir, "PG_VERSION")
	version, err := os.ReadFile(versionPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
		empty, err := isEmptyDir(dataDir)
		if err != nil {
			return "", err
		}
		if !empty {
			return "", fmt.Errorf("data dir %s is not empty and holds no PostgreSQL cluster (no PG_VERSION): "+
				"choose an empty or missing directory", dataDir)
		}
		log("initializing data dir", "data_dir", dataDir, "initdb", bins.initdb)
		if err := initdb(ctx, cfg, bins, acct, dataDir); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("read %s: %w", versionPath, err)
	default:
		if got := strings.TrimSpace(string(version)); got != bins.major {
			return "", fmt.Errorf("data dir %s was initialized by PostgreSQL %s but the binaries in %s are "+
				"PostgreSQL %s: set %s to PostgreSQL %s binaries, or use a new data dir",
				dataDir, got, bins.dir, bins.version, EnvBinDir, got)
		}
		log("reusing data dir", "data_dir", dataDir)
	}

	if acct != nil {
		owned, err := acct.ownedBy(dataDir)
		if err != nil {
			return "", fmt.Errorf("stat data dir: %w", err)
		}
		if !owned {
			if err := acct.chownTree(dataDir); err != nil {
				return "", err
			}
		}
	}
	// PostgreSQL refuses a data directory readable by others.
	if fi, err := os.Stat(dataDir); err == nil {
		if perm := fi.Mode().Perm(); perm != 0o700 && perm != 0o750 {
			if err := os.Chmod(dataDir, 0o700); err != nil {
				return "", fmt.Errorf("chmod data dir %s: %w", dataDir, err)
			}
		}
	}
	return dataDir, nil
}

// makeDataDir creates dir (mode 0700) and its missing parents (0755). When
// the server will run as another account, parents created here are made
// searchable explicitly, whatever the umask: they are ours, unlike
// pre-existing ones, which are only checked.
func makeDataDir(dir string, otherAccount bool) error {
	var missing []string
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		if _, err := os.Stat(p); err == nil || p == filepath.Dir(p) {
			break
		}
		missing = append(missing, p)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return fmt.Errorf("create data dir parent: %w", err)
	}
	if otherAccount {
		for _, p := range missing {
			if err := os.Chmod(p, 0o755); err != nil {
				return fmt.Errorf("create data dir parent: %w", err)
			}
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create data dir: %w", err)
	}
	return nil
}

// initdb initializes dataDir, which is empty. It runs initdb in a sibling
// temporary directory and renames it into place, so that a process killed
// during initdb leaves no half-initialized cluster that the next start would
// take for a real one. Where the rename is impossible (dataDir is a mount
// point, or its parent is not writable) it runs initdb in place.
func initdb(ctx context.Context, cfg Config, bins binaries, acct *account, dataDir string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dataDir), filepath.Base(dataDir)+".initdb-")
	if err == nil {
		defer os.RemoveAll(tmp) // a no-op after the rename
		if err = runInitdb(ctx, cfg, bins, acct, tmp); err != nil {
			return err
		}
		if err = os.Rename(tmp, dataDir); err == nil {
			return nil
		}
	}
	return runInitdb(ctx, cfg, bins, acct, dataDir)
}

func runInitdb(ctx context.Context, cfg Config, bins binaries, acct *account, dir string) error {
	if acct != nil {
		if err := os.Chown(dir, int(acct.uid), int(acct.gid)); err != nil {
			return fmt.Errorf("chown %s to %s: %w", dir, acct.name, err)
		}
	}
	// reject: the pg_hba.conf initdb writes lets nobody in. Cluster.ensureAuth
	// replaces it, and gives the superuser a password, before the first start.
	args := []string{"-D", dir, "--auth=reject", "-U", cfg.User, "-E", "UTF8", "--locale=C"}
	if strings.EqualFold(cfg.Settings["fsync"], "off") {
		args = append(args, "--no-sync") // the server won't sync either
	}
	cmd := exec.CommandContext(ctx, bins.initdb, args...)
	cmd.Dir = "/" // initdb resolves its own path and fails in a cwd the account cannot read
	cmd.Env = childEnv()
	if acct != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.credential()}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb %s: %w: %s", dir, err, lastLines(out, 20))
	}
	return nil
}

// childEnv is the environment of initdb and postgres: ours without the PG*
// variables, which would otherwise change their defaults (PGDATA, PGPORT,
// PGOPTIONS, ...).
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if err != nil {
		return false, fmt.Errorf("open data dir: %w", err)
	}
	defer f.Close()
	_, err = f.Readdirnames(1)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read data dir: %w", err)
	}
	return false, nil
}

// lastLines returns at most n trailing lines of out, trimmed.
func lastLines(out []byte, n int) string {
	lines := bytes.Split(bytes.TrimSpace(out), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
