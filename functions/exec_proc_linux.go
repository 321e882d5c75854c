package functions

import "syscall"

// handlerProcAttr starts a handler in its own process group (so a timeout or cancel
// kills the whole group) and has the kernel SIGKILL it if the dispatcher dies: a
// dispatcher killed with SIGKILL leaves no handler running on beside the retry.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
