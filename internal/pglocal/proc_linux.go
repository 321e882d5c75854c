//go:build linux

package pglocal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// setDeathSignal asks the kernel to send sig to the child when the thread
// that started it exits (see Config.DieWithParent).
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}

// processAlive reports whether pid names a process that has not exited. A
// zombie (exited, not yet reaped by its parent) counts as exited.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// The state follows the command name, which is in parentheses and may
	// itself contain ") ".
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z' && stat[i+2] != 'X'
	}
	return true
}

// isServerOf reports whether pid is a PostgreSQL server process whose working
// directory is dataDir. Every postgres process chdirs into its data directory,
// so this holds for the postmaster and for each of its backends.
func isServerOf(pid int, dataDir string) (bool, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return false, err
	}
	exe = strings.TrimSuffix(exe, " (deleted)") // the package was upgraded under it
	if base := filepath.Base(exe); base != "postgres" && base != "postmaster" {
		return false, nil
	}
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if err != nil {
		return false, err
	}
	return cwd == dataDir, nil
}

// serverProcessesOf lists the live postgres processes working in dataDir.
// Processes that cannot be inspected (another user's, when not root) are
// skipped: they could not be signalled either.
func serverProcessesOf(dataDir string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if ok, _ := isServerOf(pid, dataDir); ok && processAlive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// shmAttached reports whether anything is still attached to the shared memory
// segment a postmaster recorded in pidPath (its postmaster.pid). False when the
// file, its record or the segment is gone.
func shmAttached(pidPath string) bool {
	id, ok := pidFileShmID(pidPath)
	if !ok {
		return false
	}
	var desc unix.SysvShmDesc
	if _, err := unix.SysvShmCtl(id, unix.IPC_STAT, &desc); err != nil {
		return false
	}
	return desc.Nattch > 0
}
