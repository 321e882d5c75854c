package functions

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
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

// newNetns makes a network namespace with its loopback up, and returns it
// open. It is made on a thread of its own (unshare changes the calling
// thread's namespace), which goes back to the server's namespace after; a
// thread that cannot go back is never used again (it ends with its goroutine,
// still locked).
func newNetns() (*os.File, error) {
	type result struct {
		ns  *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		host, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, err}
			return
		}
		defer host.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			ch <- result{nil, fmt.Errorf("unshare: %w", err)}
			return
		}
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err == nil {
			if err = loopbackUp(); err != nil {
				ns.Close()
				ns = nil
			}
		}
		if serr := unix.Setns(int(host.Fd()), unix.CLONE_NEWNET); serr != nil {
			// Left locked: the thread ends with this goroutine.
			if ns != nil {
				ns.Close()
			}
			ch <- result{nil, fmt.Errorf("back to the server's network namespace: %w", serr)}
			return
		}
		runtime.UnlockOSThread()
		ch <- result{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

// loopbackUp brings up lo in the calling thread's network namespace (as
// bubblewrap's --unshare-net does).
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	return nil
}

// startInNetns starts cmd on the fork thread inside the network namespace ns,
// which the thread joins for the fork and leaves after, back to its own. A
// fork thread that cannot go back would start every later handler in this
// one: the server stops (panic) rather than go on so.
func startInNetns(cmd *exec.Cmd, ns *os.File) error {
	done := make(chan error, 1)
	forkThread() <- func() {
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- fmt.Errorf("sandbox network: %w", err)
			return
		}
		defer home.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("sandbox network: join the namespace: %w", err)
			return
		}
		err = cmd.Start()
		if serr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNET); serr != nil {
			panic(fmt.Sprintf("exec: the fork thread cannot go back to its network namespace: %v", serr))
		}
		done <- err
	}
	return <-done
}

// Resources of rlimit.
const (
	rlimitAS    = unix.RLIMIT_AS
	rlimitNPROC = unix.RLIMIT_NPROC
	rlimitFSIZE = unix.RLIMIT_FSIZE
)

// setRlimits sets the limits of process pid (soft and hard).
func setRlimits(pid int, limits []rlimit) error {
	for _, l := range limits {
		lim := unix.Rlimit{Cur: l.Value, Max: l.Value}
		if err := unix.Prlimit(pid, l.Resource, &lim, nil); err != nil {
			return fmt.Errorf("set %s of the sandbox: %w", strings.TrimPrefix(l.Flag, "--"), err)
		}
	}
	return nil
}
