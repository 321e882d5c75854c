//go:build unix

package runtime

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// lockCacheDir takes an exclusive, non-blocking flock on path, held as long as
// the returned file is open: owned is false when another dispatcher (of this
// process or another) holds it.
func lockCacheDir(path string) (f *os.File, owned bool, err error) {
	f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, err
	}
	return f, true, nil
}
