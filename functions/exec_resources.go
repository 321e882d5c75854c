package functions

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

// Resources bounds an exec handler: its memory, CPUs and processes (manifest:
// resources). Zero fields are unbounded.
//
// Where the server's cgroup v2 is delegated, each attempt gets a cgroup with
// memory.max, cpu.max and pids.max (exec_cgroup.go). Elsewhere this invoker
// enforces them with resource limits (setrlimit, through util-linux's prlimit
// wrapping the handler, or the sandbox around it):
//   - MemoryBytes is RLIMIT_AS, the address space of each of the handler's
//     processes: an allocation past it fails. A handler that then fails and
//     says so on stderr (out of memory, cannot allocate memory, MemoryError,
//     bad_alloc, OutOfMemoryError…) fails with CodeResourceExhausted, terminal.
//     Runtimes that reserve much more address space than they use (the JVM, Go
//     with large heaps) need a larger limit than their resident size.
//   - Pids is RLIMIT_NPROC: it counts every process of the handler's user
//     (under the sandbox, uid 65534, shared by the handlers of a server) and
//     does not bind root (a server running handlers unisolated as root).
//   - CPU is not enforced with rlimits (RLIMIT_CPU, seconds of CPU before a
//     kill, is not a share of CPUs): a note in the attempt's log says so.
type Resources struct {
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	CPU         float64 `json:"cpu,omitempty"`
	Pids        int     `json:"pids,omitempty"`
}

// outOfMemory matches what handlers print when an allocation failed.
var outOfMemory = regexp.MustCompile(`(?i)out of memory|cannot allocate memory|memoryerror|bad_alloc|memory exhausted|xmalloc|failed to allocate|outofmemoryerror|allocation failed`)

// limitCommand wraps path and args (argv, args[0] the name) in prlimit with the
// limits of res; it returns them unchanged when res sets none that rlimits
// enforce.
func (e *Exec) limitCommand(res *Resources, path string, args []string) (string, []string, error) {
	if res == nil || res.MemoryBytes <= 0 && res.Pids <= 0 {
		return path, args, nil
	}
	if e.prlimit == "" {
		return "", nil, &Error{Message: "the step sets resources, which this server enforces with util-linux's prlimit, and prlimit is not installed",
			Retryable: true, Code: CodeIsolationUnavailable}
	}
	out := []string{e.prlimit}
	if res.MemoryBytes > 0 {
		out = append(out, "--as="+strconv.FormatInt(res.MemoryBytes, 10))
	}
	if res.Pids > 0 {
		out = append(out, "--nproc="+strconv.Itoa(res.Pids))
	}
	out = append(out, "--", path)
	return e.prlimit, append(out, args[1:]...), nil
}

// findPrlimit returns the path of prlimit, or "" when it is not installed.
func findPrlimit() string {
	p, err := exec.LookPath("prlimit")
	if err != nil {
		return ""
	}
	return p
}

// resourceFailure turns a failure of a handler with a memory limit into
// CodeResourceExhausted when its stderr says it ran out of memory.
func resourceFailure(res *Resources, failure *Error, tail string) *Error {
	if res == nil || res.MemoryBytes <= 0 || !outOfMemory.MatchString(tail) {
		return failure
	}
	return &Error{Message: fmt.Sprintf("ran out of memory: its limit is %d bytes (resources.memory); %s", res.MemoryBytes, failure.Message),
		Code: CodeResourceExhausted}
}
