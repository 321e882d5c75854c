//go:build !linux

package blobstore

import "os"

// setDirectIO reports that direct I/O is not used outside Linux: spooling goes
// through the page cache.
func setDirectIO(*os.File, bool) bool { return false }
