package blobstore

import (
	"os"

	"golang.org/x/sys/unix"
)

// setDirectIO turns O_DIRECT on or off for f and reports whether it is now as
// asked; a filesystem without direct I/O refuses to turn it on.
func setDirectIO(f *os.File, on bool) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return false
	}
	ok := false
	_ = rc.Control(func(fd uintptr) {
		flags, err := unix.FcntlInt(fd, unix.F_GETFL, 0)
		if err != nil {
			return
		}
		if on {
			flags |= unix.O_DIRECT
		} else {
			flags &^= unix.O_DIRECT
		}
		_, err = unix.FcntlInt(fd, unix.F_SETFL, flags)
		ok = err == nil
	})
	return ok
}
