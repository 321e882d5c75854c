package functions

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Resources under cgroup v2. Where the server runs in a cgroup v2 hierarchy it may
// write (a delegated subtree: systemd's Delegate=yes, a container with its own
// cgroup namespace and a writable /sys/fs/cgroup) with the cpu, memory and pids
// controllers available, each attempt whose step sets resources runs in a cgroup
// of its own, made before the handler starts and removed after it ends:
//   - memory.max = resources.memory (and memory.swap.max = 0, so that the limit
//     is not worked around by swapping): the kernel's OOM killer ends the handler
//     past it, and memory.events' oom_kill count says so: the attempt fails with
//     CodeResourceExhausted whatever the handler printed.
//   - cpu.max = resources.cpu × 100 ms per 100 ms: the handler's processes together
//     get that many CPUs' worth of time, throttled, never killed.
//   - pids.max = resources.pids: the handler's processes and threads together.
//
// The handler is placed in its cgroup by the clone that creates it
// (CLONE_INTO_CGROUP, SysProcAttr.UseCgroupFD): it never runs a single instruction
// outside its limits. Elsewhere (cgroup v1, a read-only hierarchy, controllers not
// delegated) resources fall back to rlimits (exec_resources.go).

// cgroupControllers are the controllers the attempts' cgroups need.
var cgroupControllers = []string{"cpu", "memory", "pids"}

// cgroupCPUPeriod is the period of cpu.max, in microseconds (the kernel's default).
const cgroupCPUPeriod = 100_000

// cgroupV2 makes the attempts' cgroups, as children of dir.
type cgroupV2 struct {
	dir string
}

// errNoCgroup means resources cannot be enforced with cgroup v2 here; it wraps
// the reason.
var errNoCgroup = errors.New("no usable cgroup v2")

// detectCgroupV2 finds the cgroup v2 where the attempts' cgroups can be made:
// root is the cgroup2 mount (/sys/fs/cgroup), self the content of
// /proc/self/cgroup, pid this process. The process's own cgroup must offer the cpu,
// memory and pids controllers and be writable. A cgroup with processes cannot hand
// controllers to children (cgroup v2's no-internal-process rule), so when they are
// not enabled for its children yet, the process first moves into a leaf of its own
// (<cgroup>/cairn-server), then enables them. errNoCgroup, wrapping why, when any of
// it is not possible.
func detectCgroupV2(root string, self []byte, pid int) (*cgroupV2, error) {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		return nil, fmt.Errorf("%w: %s is not a cgroup v2 (unified) hierarchy", errNoCgroup, root)
	}
	own, ok := unifiedPath(self)
	if !ok {
		return nil, fmt.Errorf("%w: the process is in no cgroup v2 (/proc/self/cgroup has no 0:: line)", errNoCgroup)
	}
	dir := filepath.Join(root, filepath.Clean("/"+own))
	available, err := readFields(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	for _, c := range cgroupControllers {
		if !slices.Contains(available, c) {
			return nil, fmt.Errorf("%w: the controller %s is not available in %s (it has: %s)", errNoCgroup, c, dir,
				strings.Join(available, " "))
		}
	}
	enabled, err := readFields(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errNoCgroup, err)
	}
	var missing []string
	for _, c := range cgroupControllers {
		if !slices.Contains(enabled, c) {
			missing = append(missing, "+"+c)
		}
	}
	if len(missing) > 0 {
		leaf := filepath.Join(dir, "cairn-server")
		if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("%w: %s is not writable: %v", errNoCgroup, dir, err)
		}
		if err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
			return nil, fmt.Errorf("%w: move the server into %s: %v", errNoCgroup, leaf, err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(strings.Join(missing, " ")), 0o644); err != nil {
			return nil, fmt.Errorf("%w: enable %s in %s: %v", errNoCgroup, strings.Join(missing, " "), dir, err)
		}
	}
	return &cgroupV2{dir: dir}, nil
}

// unifiedPath is the cgroup v2 path in the content of /proc/<pid>/cgroup: the
// line "0::<path>".
func unifiedPath(self []byte) (string, bool) {
	sc := bufio.NewScanner(bytes.NewReader(self))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "0::"); ok {
			return p, true
		}
	}
	return "", false
}

// readFields reads a cgroup file of space-separated words.
func readFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(b)), nil
}

// attemptCgroup is the cgroup of one attempt.
type attemptCgroup struct {
	dir string
	// fd is the cgroup's directory, open for CLONE_INTO_CGROUP.
	fd *os.File
}

// create makes the cgroup name (a child of c's directory) with the limits of res.
func (c *cgroupV2) create(name string, res *Resources) (*attemptCgroup, error) {
	dir := filepath.Join(c.dir, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", dir, err)
	}
	a := &attemptCgroup{dir: dir}
	write := func(file, value string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0o644); err != nil {
			return fmt.Errorf("set %s of cgroup %s: %w", file, dir, err)
		}
		return nil
	}
	err := func() error {
		if res.MemoryBytes > 0 {
			if err := write("memory.max", strconv.FormatInt(res.MemoryBytes, 10)); err != nil {
				return err
			}
			// No swap for a handler with a memory limit; a kernel without swap
			// accounting has no such file.
			if err := write("memory.swap.max", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if res.CPU > 0 {
			quota := max(int64(math.Ceil(res.CPU*cgroupCPUPeriod)), 1000) // the kernel's least quota is 1 ms
			if err := write("cpu.max", fmt.Sprintf("%d %d", quota, cgroupCPUPeriod)); err != nil {
				return err
			}
		}
		if res.Pids > 0 {
			if err := write("pids.max", strconv.Itoa(res.Pids)); err != nil {
				return err
			}
		}
		fd, err := os.Open(dir)
		if err != nil {
			return fmt.Errorf("open cgroup %s: %w", dir, err)
		}
		a.fd = fd
		return nil
	}()
	if err != nil {
		_ = a.remove()
		return nil, err
	}
	return a, nil
}

// oomKills is how many of the cgroup's processes the OOM killer ended (the
// oom_kill line of memory.events); 0 when it cannot be read.
func (a *attemptCgroup) oomKills() int {
	b, err := os.ReadFile(filepath.Join(a.dir, "memory.events"))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// remove removes the cgroup once the handler has ended. A cgroup that still has
// processes (a handler's child that left its process group) cannot be removed:
// they are killed (cgroup.kill, Linux 5.14) and the removal tried again for up to a
// second.
func (a *attemptCgroup) remove() error {
	if a.fd != nil {
		_ = a.fd.Close()
	}
	deadline := time.Now().Add(time.Second)
	for killed := false; ; {
		err := syscall.Rmdir(a.dir)
		switch {
		case err == nil, errors.Is(err, syscall.ENOENT):
			return nil
		case errors.Is(err, syscall.ENOTEMPTY):
			// Not a cgroupfs (whose directories are removed with their control
			// files): the tests' directory laid out like one.
			return os.RemoveAll(a.dir)
		case !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline):
			return fmt.Errorf("remove cgroup %s: %w", a.dir, err)
		}
		if !killed {
			_ = os.WriteFile(filepath.Join(a.dir, "cgroup.kill"), []byte("1"), 0o644)
			killed = true
		}
		time.Sleep(10 * time.Millisecond) // the killed processes are being reaped
	}
}

// cgroupFailure is the failure of a handler whose cgroup's OOM killer ended one of
// its processes: CodeResourceExhausted, terminal.
func cgroupFailure(res *Resources, kills int, failure *Error) *Error {
	return &Error{Message: fmt.Sprintf("ran out of memory: the out-of-memory killer ended %d of its processes at its limit of %d bytes (resources.memory, or the server's default); %s",
		kills, res.MemoryBytes, failure.Message), Code: CodeResourceExhausted}
}

// randomHex is n random bytes in hex: a name no other attempt has.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}
