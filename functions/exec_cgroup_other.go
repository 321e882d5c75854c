//go:build !linux

package functions

import (
	"fmt"
	"os"
	"syscall"
)

// intoCgroup does nothing outside Linux: there are no cgroups.
func intoCgroup(*syscall.SysProcAttr, *os.File) {}

// detectCgroup reports that there are no cgroups outside Linux.
func detectCgroup(string) (*cgroupV2, error) {
	return nil, fmt.Errorf("%w: not Linux", errNoCgroup)
}
