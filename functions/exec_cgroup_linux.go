package functions

import (
	"os"
	"syscall"
)

// intoCgroup makes the process attr starts begin in the cgroup open as fd
// (CLONE_INTO_CGROUP).
func intoCgroup(attr *syscall.SysProcAttr, fd *os.File) {
	attr.UseCgroupFD = true
	attr.CgroupFD = int(fd.Fd())
}

// detectCgroup finds this server's cgroup v2 for the attempts (detectCgroupV2),
// under root (default /sys/fs/cgroup).
func detectCgroup(root string) (*cgroupV2, error) {
	if root == "" {
		root = "/sys/fs/cgroup"
	}
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	return detectCgroupV2(root, self, os.Getpid())
}
