package functions

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// attemptDirPrefix starts the name of every attempt's private directory
// (HOME and TMPDIR), followed by the server's pid: attemptDirPrefix<pid>-<random>.
const attemptDirPrefix = "cairn-exec-"

// attemptDirName matches an attempt directory's name; its group is the pid of
// the server that made it.
var attemptDirName = regexp.MustCompile(`^` + attemptDirPrefix + `([0-9]+)-`)

// RemoveLeftoverAttempts removes the attempt directories under tempDir
// (ExecConfig.TempDir) of servers that are gone: an attempt removes its own when
// it ends, but a server killed meanwhile (SIGKILL, a crash) leaves them, with the
// tmpfs a root server mounts on them (ExecConfig.TempBytes) still holding what
// the handler wrote. Directories of live processes are left alone, so that
// servers sharing a temporary directory do not take each other's. It returns
// how many it removed, and the first error met. NewExec calls it; tests that
// kill servers call it to clean up after them.
func RemoveLeftoverAttempts(tempDir string) (int, error) {
	if tempDir == "" {
		tempDir = os.TempDir()
	}
	if real, err := filepath.EvalSymlinks(tempDir); err == nil {
		tempDir = real
	}
	gone := func(name string) bool {
		m := attemptDirName.FindStringSubmatch(name)
		if m == nil {
			return false
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil || pid <= 0 {
			return false
		}
		// ESRCH: no such process. EPERM: one of another user, alive.
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
	}
	var firstErr error
	keep := func(err error) {
		if firstErr == nil {
			firstErr = err
		}
	}
	for _, mp := range mountPointsUnder(tempDir) {
		if gone(filepath.Base(mp)) {
			unmountTemp(mp)
		}
	}
	entries, err := os.ReadDir(tempDir)
	if err != nil {
		return 0, fmt.Errorf("remove leftover attempt directories: %w", err)
	}
	n := 0
	for _, e := range entries {
		if !e.IsDir() || !gone(e.Name()) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(tempDir, e.Name())); err != nil {
			keep(fmt.Errorf("remove leftover attempt directory: %w", err))
			continue
		}
		n++
	}
	return n, firstErr
}

// mountPointsUnder lists the mount points directly under dir
// (/proc/self/mountinfo; none where it cannot be read).
func mountPointsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "36 35 98:0 /root /mount/point rw,… - type source opts": the fifth field,
		// with spaces and the like escaped in octal (\040).
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if filepath.Dir(mp) == dir {
			out = append(out, mp)
		}
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
