//go:build !linux

package blobstore

// allocPart returns a part buffer of size bytes.
func allocPart(size int64) []byte { return make([]byte, size) }

// freePart releases a buffer of allocPart. Nothing may use it after.
func freePart([]byte) {}
