//go:build !linux

package testenv

import "syscall"

// s3SysProcAttr has no parent-death signal outside Linux: a server started by a
// test binary that crashes outlives it there.
func s3SysProcAttr() *syscall.SysProcAttr { return nil }

// s3ProcessAlive cannot tell portably, so it keeps every directory.
func s3ProcessAlive(int) bool { return true }
