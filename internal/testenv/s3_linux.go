package testenv

import (
	"errors"
	"syscall"
)

// s3SysProcAttr makes the kernel kill the server when the thread that started
// it exits (see s3RunVersitygw), so that it dies with the test binary.
func s3SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// s3ProcessAlive reports whether a process with that pid exists.
func s3ProcessAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
