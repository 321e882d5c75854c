package blobstore

import "golang.org/x/sys/unix"

// allocPart returns a part buffer of size bytes outside the Go heap (an
// anonymous mapping), so that a live part does not raise the collector's heap
// goal, and the garbage the goal lets pile up, by its size; freePart unmaps it.
// It falls back to the heap where the mapping fails.
func allocPart(size int64) []byte {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return make([]byte, size)
	}
	return b
}

// freePart releases a buffer of allocPart. Nothing may use it after.
func freePart(b []byte) {
	if unix.Munmap(b) != nil {
		return // a heap buffer: the collector's
	}
}
