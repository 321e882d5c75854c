package functions

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// handlerProcAttr starts a handler in a session and process group of its own (so a
// timeout or cancel kills the whole group, and it has no controlling terminal to
// push input into) and has the kernel SIGKILL it if the dispatcher dies: a
// dispatcher killed with SIGKILL leaves no handler running on beside the retry.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}

// growPipe asks for a pipe buffer of outputPipeSize bytes instead of the
// default 64 KiB, so that a handler printing a large output hands over a
// megabyte per read. Best effort: past /proc/sys/fs/pipe-max-size, or for an
// unprivileged user over its pipe quota, the pipe keeps its size.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, outputPipeSize)
	})
}
