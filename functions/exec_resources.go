package functions

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

// Resources bounds an exec handler: its memory, CPUs and processes (manifest:
// resources). Zero fields take the server's defaults (ExecConfig:
// DefaultMemoryBytes, DefaultPids; CPU has none).
//
// Where the server's cgroup v2 is delegated, each attempt gets a cgroup with
// memory.max, cpu.max and pids.max (exec_cgroup.go). Elsewhere this invoker
// enforces them with resource limits (set on the sandbox's init while bwrap
// waits to start the handler, or through util-linux's prlimit wrapping an
// unisolated handler):
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

// Default bounds of every exec handler whose step does not set its own
// (ExecConfig.DefaultMemoryBytes, DefaultPids, TempBytes).
const (
	// DefaultMemoryBytes is a handler's memory when its step sets none: 2 GiB.
	DefaultMemoryBytes = 2 << 30
	// DefaultPids is a handler's processes and threads when its step sets none.
	// Under cgroup v2 it is the handler's own; under rlimits (RLIMIT_NPROC) it is
	// the total of its user's, that is of every sandboxed handler of the machine
	// running as that uid (65534 for root servers).
	DefaultPids = 1024
	// DefaultTempBytes bounds a handler's files: each file it writes (and each
	// memfd) on every server, and the whole of its HOME and TMPDIR (a tmpfs of
	// that size) on a root server that isolates handlers: 1 GiB.
	DefaultTempBytes = 1 << 30
)

// limits are the bounds of one attempt: the step's resources, the server's
// defaults where it sets none.
type limits struct {
	res Resources
	// stepSet says the step set memory or pids itself (a server that cannot
	// enforce them then refuses the step; it runs without the defaults).
	stepSet bool
	// fileBytes bounds each file the handler writes (RLIMIT_FSIZE); 0: none.
	fileBytes int64
}

// limitsOf returns the bounds of an attempt of a step with resources step. The
// defaults bound handlers in the sandbox and in cgroups: an unisolated handler
// on a server without cgroups (development, CAIRN_EXEC_ISOLATION=none) has
// only what its step sets, since RLIMIT_NPROC would count the server's own
// user's processes.
func (e *Exec) limitsOf(step *Resources) limits {
	var l limits
	if step != nil {
		l.res = *step
		l.stepSet = step.MemoryBytes > 0 || step.Pids > 0
	}
	if e.sandbox == nil && e.cgroup == nil {
		return l
	}
	if l.res.MemoryBytes <= 0 {
		l.res.MemoryBytes = e.defaultMemory
	}
	if l.res.Pids <= 0 {
		l.res.Pids = e.defaultPids
	}
	if e.sandbox != nil {
		l.fileBytes = e.tempBytes
		if e.cgroup == nil && l.res.MemoryBytes > 0 {
			// Under rlimits a memfd's pages count against no limit but this
			// one: no file larger than the handler's memory.
			l.fileBytes = min(l.fileBytes, l.res.MemoryBytes)
		}
	}
	return l
}

// defaultBound reads an ExecConfig default: 0 is def, negative is none.
func defaultBound[T int | int64](v, def T) T {
	switch {
	case v == 0:
		return def
	case v < 0:
		return 0
	}
	return v
}

// outOfMemory matches what handlers print when an allocation failed.
var outOfMemory = regexp.MustCompile(`(?i)out of memory|cannot allocate memory|memoryerror|bad_alloc|memory exhausted|xmalloc|failed to allocate|outofmemoryerror|allocation failed`)

// rlimit is one resource limit of a handler: soft and hard both Value.
type rlimit struct {
	// Resource is RLIMIT_AS, RLIMIT_NPROC or RLIMIT_FSIZE; Flag is prlimit's
	// option for it.
	Resource int
	Flag     string
	Value    uint64
}

// rlimits returns the rlimits of l: RLIMIT_FSIZE, and, when rlimits (not a
// cgroup) enforce them, RLIMIT_AS and RLIMIT_NPROC.
func (l limits) rlimits(cgroup bool) []rlimit {
	var out []rlimit
	if !cgroup && l.res.MemoryBytes > 0 {
		out = append(out, rlimit{rlimitAS, "--as", uint64(l.res.MemoryBytes)})
	}
	if !cgroup && l.res.Pids > 0 {
		out = append(out, rlimit{rlimitNPROC, "--nproc", uint64(l.res.Pids)})
	}
	if l.fileBytes > 0 {
		out = append(out, rlimit{rlimitFSIZE, "--fsize", uint64(l.fileBytes)})
	}
	return out
}

// limitCommand wraps path and args (argv, args[0] the name) in prlimit with
// the rlimits of l (an unsandboxed handler: a sandbox gets them from
// holdSandbox, without a process more). Without prlimit, a step that set
// resources itself is refused; the defaults are then not enforced.
func (e *Exec) limitCommand(l limits, cgroup bool, path string, args []string) (string, []string, error) {
	var out []string
	for _, r := range l.rlimits(cgroup) {
		out = append(out, r.Flag+"="+strconv.FormatUint(r.Value, 10))
	}
	switch {
	case len(out) == 0:
		return path, args, nil
	case e.prlimit == "" && l.stepSet && !cgroup:
		return "", nil, &Error{Message: "the step sets resources, which this server enforces with util-linux's prlimit, and prlimit is not installed",
			Retryable: true, Code: CodeIsolationUnavailable}
	case e.prlimit == "":
		return path, args, nil
	}
	out = append(append([]string{e.prlimit}, out...), "--", path)
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
	return &Error{Message: fmt.Sprintf("ran out of memory: its limit is %d bytes (resources.memory, or the server's default); %s", res.MemoryBytes, failure.Message),
		Code: CodeResourceExhausted}
}
