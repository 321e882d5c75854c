//go:build !linux

package functions

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// handlerProcAttr starts a handler in its own process group. Outside Linux there is
// no parent-death signal: a handler of a killed dispatcher runs until it exits or
// writes to its closed pipes.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// growPipe does nothing outside Linux: pipes keep their size.
func growPipe(*os.File) {}

// openSandboxNamespaces: there is no sandbox outside Linux.
func openSandboxNamespaces(int, bool) (netns, userns *os.File, err error) {
	return nil, nil, errors.New("sandbox network: Linux only")
}

// mountTemp: no tmpfs outside Linux; each file is bounded only where rlimits are.
func mountTemp(string, int64) error { return errors.New("not on this system") }

// unmountTemp does nothing outside Linux.
func unmountTemp(string) {}

// newNetns: there is no sandbox outside Linux.
func newNetns() (*os.File, error) { return nil, errors.New("sandbox network: Linux only") }

// startInNetns: there is no sandbox outside Linux.
func startInNetns(*exec.Cmd, *os.File) error { return errors.New("sandbox network: Linux only") }

// Resources of rlimit: the numbers do not matter outside Linux (no sandbox).
const (
	rlimitAS    = 9
	rlimitNPROC = 6
	rlimitFSIZE = 1
)

// setRlimits: there is no sandbox outside Linux.
func setRlimits(int, []rlimit) error { return errors.New("Linux only") }
