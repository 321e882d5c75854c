package functions

import (
	"fmt"
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

// openSandboxNamespaces opens the network namespace of process pid and, when
// rootless, the user namespace that owns it (NS_GET_USERNS: bubblewrap nests the
// handler's own user namespace inside that one, --disable-userns).
func openSandboxNamespaces(pid int, rootless bool) (netns, userns *os.File, err error) {
	netns, err = os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox network: %w", err)
	}
	if !rootless {
		return netns, nil, nil
	}
	fd, err := unix.IoctlRetInt(int(netns.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		netns.Close()
		return nil, nil, fmt.Errorf("sandbox network: the owner of the network namespace: %w", err)
	}
	return netns, os.NewFile(uintptr(fd), "userns"), nil
}

// mountTemp mounts a tmpfs of size bytes on dir (a root server's attempt
// directory), private to the server's user.
func mountTemp(dir string, size int64) error {
	opts := fmt.Sprintf("size=%d,mode=0700", size)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// unmountTemp lets go of mountTemp's tmpfs (lazily: a process of the handler
// that escaped the kill may still hold a file).
func unmountTemp(dir string) {
	_ = unix.Unmount(dir, unix.MNT_DETACH)
}
