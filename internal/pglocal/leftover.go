package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidFileName is the lock file a running postmaster keeps in its data
// directory; its first line is the postmaster's process id.
const pidFileName = "postmaster.pid"

// Left-over servers get this long for a fast shutdown, then this long for an
// immediate one, before SIGKILL.
const (
	leftoverFastTimeout      = 30 * time.Second
	leftoverImmediateTimeout = 5 * time.Second
)

// reclaim makes the data directory startable after an earlier owner died
// without stopping PostgreSQL. It must only run while this Cluster has no
// server of its own running.
//
//   - postmaster.pid names a live postgres of this data directory: the server
//     outlived its parent; stop it (SIGINT, then SIGQUIT, then SIGKILL).
//   - it names a live process that is something else: the id was reused after
//     a crash; PostgreSQL would refuse to start ("lock file already exists"),
//     so remove the file.
//   - it names a dead process: PostgreSQL handles that itself.
//
// Then any postgres process still working in the data directory is an orphaned
// backend of a killed postmaster. It keeps the old shared memory attached,
// which makes the new postmaster refuse to start, so it is killed, and the
// start waits until nothing holds that memory any more. Finally the
// Unix socket files left in the data directory by a killed server are removed:
// their lock files would stop a server on the same port when their process id
// has been reused.
func reclaim(ctx context.Context, dataDir string, log func(msg string, args ...any)) error {
	pidPath := filepath.Join(dataDir, pidFileName)
	pid, err := readPidFile(pidPath)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		log("ignoring unreadable postmaster.pid", "error", err)
	case pid > 0 && processAlive(pid):
		ours, err := isServerOf(pid, dataDir)
		if err != nil {
			return fmt.Errorf("data dir %s is locked by live process %d that cannot be inspected: %w", dataDir, pid, err)
		}
		if ours {
			log("stopping a left-over postgres of this data dir", "pid", pid)
			if err := stopForeign(ctx, pid); err != nil {
				return fmt.Errorf("stop left-over postgres %d of %s: %w", pid, dataDir, err)
			}
		} else {
			log("removing stale postmaster.pid: its process id now belongs to another program", "pid", pid)
			if err := os.Remove(pidPath); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove stale %s: %w", pidPath, err)
			}
		}
	}

	orphans, err := serverProcessesOf(dataDir)
	if err != nil {
		return err
	}
	if len(orphans) > 0 {
		log("killing orphaned postgres processes of this data dir", "pids", orphans)
		for _, p := range orphans {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		if !waitGone(ctx, orphans, leftoverImmediateTimeout) {
			return fmt.Errorf("orphaned postgres processes %v of %s did not exit after SIGKILL", orphans, dataDir)
		}
	}
	// The killed server's processes may have exited before the kernel let go of
	// their memory (it drops the last reference later when another task, such as
	// a memory monitor, held one): PostgreSQL refuses to start while its old
	// shared memory segment is attached.
	if !waitFor(ctx, func() bool { return !shmAttached(pidPath) }, leftoverImmediateTimeout) {
		return fmt.Errorf("the shared memory of a killed postgres of %s is still attached after %v", dataDir, leftoverImmediateTimeout)
	}

	sockets, _ := filepath.Glob(filepath.Join(dataDir, ".s.PGSQL.*"))
	for _, s := range sockets {
		_ = os.Remove(s)
	}
	return ctx.Err()
}

// stopForeign stops a postmaster that is not our child: a fast shutdown
// (what `pg_ctl stop -m fast` sends), then an immediate one, then SIGKILL of
// its process group and of itself. Signals are sent directly rather than via
// pg_ctl because pg_ctl refuses to run as root and only does the same.
func stopForeign(ctx context.Context, pid int) error {
	steps := []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, leftoverFastTimeout},
		{syscall.SIGQUIT, leftoverImmediateTimeout},
		{syscall.SIGKILL, leftoverImmediateTimeout},
	}
	for _, s := range steps {
		if err := syscall.Kill(pid, s.sig); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return fmt.Errorf("signal %v: %w", s.sig, err)
		}
		if waitGone(ctx, []int{pid}, s.timeout) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return errors.New("still running after SIGKILL")
}

// waitGone polls until none of pids is alive, for at most timeout. It polls
// because the processes are not our children: there is nothing to wait on.
func waitGone(ctx context.Context, pids []int, timeout time.Duration) bool {
	return waitFor(ctx, func() bool { return !slices.ContainsFunc(pids, processAlive) }, timeout)
}

// waitFor polls done every 20 ms until it holds, for at most timeout.
func waitFor(ctx context.Context, done func() bool, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if done() {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
}

// readPidFile returns the process id on the first line of a postmaster.pid.
func readPidFile(path string) (int, error) {
	lines, err := pidFileLines(path)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(lines[0]))
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return pid, nil
}

// pidFileShmID returns the id of the shared memory segment recorded in a
// postmaster.pid (its seventh line: the segment's key and id).
func pidFileShmID(path string) (int, bool) {
	lines, err := pidFileLines(path)
	if err != nil || len(lines) < 7 {
		return 0, false
	}
	fields := strings.Fields(lines[6])
	if len(fields) != 2 {
		return 0, false
	}
	id, err := strconv.Atoi(fields[1])
	return id, err == nil
}

// pidFileLines reads a postmaster.pid's lines (at least one).
func pidFileLines(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Split(string(b), "\n"), nil
}
