package functions

import "syscall"

// handlerProcAttr starts a handler in a session and process group of its own (so a
// timeout or cancel kills the whole group, and it has no controlling terminal to
// push input into) and has the kernel SIGKILL it if the dispatcher dies: a
// dispatcher killed with SIGKILL leaves no handler running on beside the retry.
func handlerProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
}
