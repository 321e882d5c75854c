//go:build !linux

package pglocal

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// setDeathSignal does nothing: only Linux has a parent-death signal, so
// Config.DieWithParent has no effect elsewhere.
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}

// processAlive reports whether a process with that pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// isServerOf reports whether pid is a postgres process. Without /proc its
// working directory is unknown, so any postgres named by the data
// directory's postmaster.pid counts as this data directory's.
func isServerOf(pid int, _ string) (bool, error) {
	out, err := exec.Command("ps", "-o", "comm=", "-p", strconv.Itoa(pid)).Output()
	if err != nil {
		return false, err
	}
	base := filepath.Base(strings.TrimSpace(string(out)))
	return base == "postgres" || base == "postmaster", nil
}

// serverProcessesOf finds nothing: without /proc, orphaned backends cannot
// be told apart from other clusters' processes.
func serverProcessesOf(string) ([]int, error) { return nil, nil }

// shmAttached cannot look at the segment here: PostgreSQL says so at its start.
func shmAttached(string) bool { return false }
