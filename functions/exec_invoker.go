package functions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cairnrun/cairn/blobstore"
)

// Defaults of ExecConfig.
const (
	// DefaultKillGrace is ExecConfig.KillGrace's default.
	DefaultKillGrace = 2 * time.Second
	// DefaultMaxControlLine is ExecConfig.MaxControlLine's default: 1 MiB.
	DefaultMaxControlLine = 1 << 20
)

// EnvControlFD names the environment variable that tells an exec handler which
// file descriptor takes its control messages (always 3).
const EnvControlFD = "CAIRN_CONTROL_FD"

const (
	// controlFD is the child's descriptor for control messages: ExtraFiles[0].
	controlFD = 3
	// stderrTailSize is how much of the end of stderr goes into a failure's message.
	stderrTailSize = 2 << 10
	// pipeCloseDelay is how long, after the process group was sent SIGKILL, the
	// invoker gives the killed processes to let go of stdout, stderr and the
	// control pipe. A pipe that still has a writer then is held by a process that
	// left the group (setsid), and may never end: the invoker stops reading it.
	pipeCloseDelay = 250 * time.Millisecond
	// pipePollInterval is how often the invoker checks, after the handler
	// exited, whether its pipes still have writers.
	pipePollInterval = 50 * time.Millisecond
	// copyBufferSize is the chunk size of the stdout and stderr copies.
	copyBufferSize = 32 << 10
	// outputPipeSize is the buffer asked for stdout's pipe (growPipe) once an
	// output is larger than one read, and outputReadSize the size of each read
	// after that: a large output moves in few, large reads, and the handler
	// writes on while a read's piece is handed on. The read buffer is on the
	// heap, for the attempt's time: a quarter of the pipe.
	outputPipeSize = 1 << 20
	outputReadSize = 256 << 10
	// startTries bounds the starts of a program that fail with ETXTBSY.
	startTries = 5
)

// ExecConfig configures an Exec invoker. A nil *ExecConfig means defaults.
type ExecConfig struct {
	// Logger receives the invoker's own diagnostics (a handler's stderr goes to
	// the Sink, never here). Default: discard.
	Logger *slog.Logger
	// KillGrace is how long a handler's process group has between SIGTERM and
	// SIGKILL when the attempt is stopped (ctx ended, lease lost), and how long
	// stdout and stderr may stay open after the handler exited (a background
	// grandchild holding them) before the group is killed. Default: 2s.
	KillGrace time.Duration
	// ExtraEnv holds "KEY=value" entries added to every handler's environment.
	// They override PATH, HOME, LANG and TMPDIR but never the CAIRN_* variables.
	ExtraEnv []string
	// MaxControlLine is the longest control message accepted on fd 3, in bytes;
	// longer lines are skipped and noted in the attempt's log.
	// Default: DefaultMaxControlLine (1 MiB).
	MaxControlLine int
	// TempDir is where each attempt's private directory (its HOME and TMPDIR,
	// removed when the attempt ends) is created. Default: os.TempDir().
	TempDir string
	// Isolation says how handlers are kept from the server: IsolationBwrap (a
	// sandbox; see IsolationBwrap) or IsolationNone. Default: IsolationNone, for
	// tests and embedding; `cairn serve` sets IsolationBwrap.
	Isolation Isolation
	// SandboxUID is the uid (and gid) of handlers under IsolationBwrap when the
	// server runs as root. Default: DefaultSandboxUID (65534, nobody).
	SandboxUID int
	// CgroupRoot is the cgroup v2 mount under which the server's own cgroup is
	// looked for to enforce resources with cgroups (exec_cgroup.go); "none" never
	// uses cgroups. Without a usable cgroup v2, resources are enforced with rlimits
	// (exec_resources.go). Default: /sys/fs/cgroup.
	CgroupRoot string
	// DefaultMemoryBytes bounds the memory of handlers whose step sets none
	// (resources.memory): cgroup v2's memory.max, else RLIMIT_AS. Negative: no
	// default. Default: DefaultMemoryBytes (2 GiB).
	DefaultMemoryBytes int64
	// DefaultPids bounds the processes and threads of handlers whose step sets
	// none (resources.pids), where they can be bounded: cgroup v2's pids.max, or
	// RLIMIT_NPROC in the sandbox. Negative: no default. Default: DefaultPids
	// (1024).
	DefaultPids int
	// TempBytes bounds each file a handler writes (RLIMIT_FSIZE, memfds
	// included) and, on a root server with IsolationBwrap, its HOME and TMPDIR
	// together (a tmpfs of that size). Negative: no bound. Default:
	// DefaultTempBytes (1 GiB).
	TempBytes int64
}

// Exec runs exec steps: a program of the bundle, once per attempt, in its own
// process group (docs/functions.md, "exec").
//
// The program (Spec.Exec[0]) is resolved inside Invocation.BundleDir, which is
// also its working directory; a path that is absolute or leaves the bundle
// (through ".." or a symbolic link) is a terminal *Error, and so is a program
// that is missing or not executable. The envelope is written to its stdin as one
// line of JSON (a program need not read it). Everything it writes to stdout is streamed to
// Sink.Output; stderr is streamed to Sink.Log. File descriptor 3 takes
// newline-delimited JSON control messages:
//
//	{"checkpoint": <any JSON>}                     → Sink.Checkpoint
//	{"checkpoint_file": "/path"}                   → Sink.CheckpointFile (a regular file; relative paths start at the bundle)
//	{"progress": <any JSON>}                       → Sink.Progress
//	{"error": {"message": "…", "retryable": false}} → the attempt's error (last one wins)
//
// Malformed messages are noted in the log and ignored.
//
// The environment is not inherited: the handler gets PATH and LANG (from the
// dispatcher's environment when NewExec ran), HOME and TMPDIR (a private
// directory per attempt, removed afterwards), CAIRN_RUN_ID, CAIRN_STEP,
// CAIRN_ATTEMPT, CAIRN_WORKFLOW, CAIRN_VERSION, CAIRN_CONTROL_FD=3,
// ExecConfig.ExtraEnv and Spec.Env (the step's env).
//
// Exit status 0 is success, unless an error control message was sent: then that
// error. Any other exit or a signal is a retryable *Error (CodeExitStatus,
// CodeSignal) whose message ends with the last 2 KiB of stderr, unless the
// handler sent an error message: then that error, retryable as it said.
//
// Everything the handler wrote before it exited is read and handed to the Sink,
// in order, however long the Sink takes: a slow Sink makes the handler wait on a
// full pipe, it never loses a line (a handler's last words are often its error
// message).
//
// When ctx ends, or a Sink method reports ErrLeaseLost, the process group gets
// SIGTERM, then SIGKILL after KillGrace, and Invoke returns context.Cause(ctx)
// (or the lease error) once the process is reaped; what is left in the pipes
// then is dropped shortly after the kill. Whatever is left of the group when the
// attempt ends is killed too. A process that leaves the group (setsid) escapes
// this; the invoker then stops reading the pipes it still holds shortly after
// the kill (keeping what they held then, so what the handler wrote), so that
// Invoke still returns.
//
// Exec is safe for concurrent use.
type Exec struct {
	logger         *slog.Logger
	killGrace      time.Duration
	extraEnv       []string
	maxControlLine int
	tempDir        string
	// baseEnv is PATH and LANG captured from the dispatcher's environment.
	baseEnv []string
	// sandbox isolates handlers (IsolationBwrap); nil without isolation.
	sandbox *sandbox
	// prlimit is util-linux's prlimit, which applies Spec.Resources to
	// unisolated handlers without cgroups (a sandbox's are set while it
	// holds, holdSandbox); "" when it is not installed.
	prlimit string
	// cgroup makes the attempts' cgroups, which apply Spec.Resources; nil
	// without a usable cgroup v2 (cgroupErr says why): rlimits then.
	cgroup    *cgroupV2
	cgroupErr error
	// defaultMemory, defaultPids and tempBytes are ExecConfig's bounds (0: none).
	defaultMemory int64
	defaultPids   int
	tempBytes     int64
	// tempMountOnce logs once that attempt directories cannot be mounted.
	tempMountOnce sync.Once
	// unavailable is why handlers cannot run here: IsolationBwrap was asked for
	// and does not work. Every attempt then fails with CodeIsolationUnavailable.
	unavailable error
	// metrics time the attempts' phases (exec_metrics.go).
	metrics *execMetrics
}

// NewExec returns an Exec invoker configured by cfg (nil means defaults). It
// captures PATH and LANG from the current environment (PATH defaults to
// /usr/local/bin:/usr/bin:/bin, LANG to C.UTF-8). With IsolationBwrap it runs one
// trivial sandbox to check that bubblewrap works here; if it does not, the
// invoker refuses every attempt (see Isolation).
func NewExec(cfg *ExecConfig) *Exec {
	if cfg == nil {
		cfg = &ExecConfig{}
	}
	e := &Exec{
		logger:         loggerOrDiscard(cfg.Logger).With("component", "exec_invoker"),
		killGrace:      cfg.KillGrace,
		extraEnv:       append([]string(nil), cfg.ExtraEnv...),
		maxControlLine: cfg.MaxControlLine,
		tempDir:        cfg.TempDir,
		defaultMemory:  defaultBound(cfg.DefaultMemoryBytes, DefaultMemoryBytes),
		defaultPids:    defaultBound(cfg.DefaultPids, DefaultPids),
		tempBytes:      defaultBound(cfg.TempBytes, DefaultTempBytes),
		metrics:        newExecMetrics(),
	}
	if e.killGrace <= 0 {
		e.killGrace = DefaultKillGrace
	}
	if e.maxControlLine <= 0 {
		e.maxControlLine = DefaultMaxControlLine
	}
	if e.tempDir == "" {
		e.tempDir = os.TempDir()
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	lang := os.Getenv("LANG")
	if lang == "" {
		lang = "C.UTF-8"
	}
	e.baseEnv = []string{"PATH=" + path, "LANG=" + lang}
	e.prlimit = findPrlimit()
	if cfg.CgroupRoot == "none" {
		e.cgroupErr = fmt.Errorf("%w: turned off", errNoCgroup)
	} else {
		e.cgroup, e.cgroupErr = detectCgroup(cfg.CgroupRoot)
	}
	if e.cgroup != nil {
		e.logger.Info("resources of exec steps are enforced with cgroup v2", "cgroup", e.cgroup.dir)
	} else {
		e.logger.Info("resources of exec steps are enforced with rlimits (prlimit)", "reason", e.cgroupErr.Error(),
			"prlimit", e.prlimit)
	}
	if n, err := RemoveLeftoverAttempts(e.tempDir); n > 0 || err != nil {
		e.logger.Info("removed the attempt directories of servers that are gone", "count", n, "error", err)
	}
	if cfg.Isolation == IsolationBwrap {
		uid := cfg.SandboxUID
		if uid <= 0 {
			uid = DefaultSandboxUID
		}
		e.sandbox, e.unavailable = newSandbox(context.Background(), uid, e.metrics)
	}
	return e
}

// Isolation says how this invoker runs handlers ("bubblewrap, as uid 65534",
// "none: handlers run as the server's user"), or why it cannot run them.
func (e *Exec) Isolation() (string, error) {
	switch {
	case e.unavailable != nil:
		return "", e.unavailable
	case e.sandbox != nil:
		return e.sandbox.describe(), nil
	}
	return "none: handlers run as the server's user, unisolated", nil
}

// Invoke runs one attempt of an exec step; see Exec for the protocol. It returns
// nil on success, an *Error when the program failed or cannot be run,
// context.Cause(ctx) when ctx ended first, an error wrapping ErrLeaseLost when a
// Sink method reported it, and any other error for an infrastructure failure
// (pipes, temporary directory, fork).
func (e *Exec) Invoke(ctx context.Context, inv *Invocation, sink Sink) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if e.unavailable != nil {
		return &Error{Message: "exec steps cannot run on this server: " + e.unavailable.Error(),
			Retryable: true, Code: CodeIsolationUnavailable}
	}
	if inv.Spec.NoNetwork && e.sandbox == nil {
		return &Error{Message: "the step asks for no network (network: none), which only a server that isolates handlers can enforce; this one runs them unisolated (CAIRN_EXEC_ISOLATION=none)",
			Retryable: true, Code: CodeIsolationUnavailable}
	}
	program, bundleDir, err := resolveProgram(inv.BundleDir, inv.Spec.Exec)
	if err != nil {
		return err
	}
	for _, p := range inv.Spec.AllowPorts {
		if p < 1 || p > 65535 {
			return invalidSpecf("exec: network allow: port %d is not 1 to 65535", p)
		}
	}
	network := e.sandbox != nil && !inv.Spec.NoNetwork
	// pooled: the sandbox joins a namespace of the pool; else, with a network,
	// bwrap makes one and waits until connect has connected it.
	pooled := e.sandbox != nil && e.sandbox.pool != nil
	connectAfterStart := network && !pooled
	if network && e.sandbox.network.err != nil {
		return &Error{Message: "exec steps with network cannot run on this server: " + e.sandbox.network.err.Error(),
			Retryable: true, Code: CodeIsolationUnavailable}
	}
	clock := e.metrics.clock()
	// Registered first, so it runs last: after every other deferred release.
	defer clock.lap(PhaseCleanup)
	payload, err := json.Marshal(inv.Envelope)
	if err != nil {
		return fmt.Errorf("exec: encode envelope: %w", err)
	}
	// One line: `read -r envelope` in a shell script sees a complete line.
	payload = append(payload, '\n')

	attemptDir, err := os.MkdirTemp(e.tempDir, attemptDirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return fmt.Errorf("exec: create attempt directory: %w", err)
	}
	logger := e.logger.With("run_id", inv.Envelope.RunID, "step", inv.Envelope.Step,
		"attempt", inv.Envelope.Attempt)
	defer func() {
		if err := os.RemoveAll(attemptDir); err != nil {
			logger.WarnContext(ctx, "remove attempt directory", "path", attemptDir, "error", err)
		}
	}()
	if e.sandbox != nil && !e.sandbox.rootless && e.tempBytes > 0 {
		// HOME and TMPDIR on a tmpfs of tempBytes (unmounted before the
		// removal above); where the server may not mount, RLIMIT_FSIZE still
		// bounds each file.
		if err := mountTemp(attemptDir, e.tempBytes); err != nil {
			e.tempMountOnce.Do(func() {
				logger.Warn("exec: HOME and TMPDIR of handlers are not size-bounded on this server (only each file is)", "error", err)
			})
		} else {
			defer unmountTemp(attemptDir)
		}
	}
	home := filepath.Join(attemptDir, "home")
	tmp := filepath.Join(attemptDir, "tmp")
	for _, dir := range []string{home, tmp} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return fmt.Errorf("exec: create attempt directory: %w", err)
		}
		if e.sandbox != nil {
			if err := e.sandbox.prepareDir(dir); err != nil {
				return fmt.Errorf("exec: create attempt directory: %w", err)
			}
		}
	}

	r := &execRun{
		exec:      e,
		sink:      sink,
		logger:    logger,
		bundleDir: bundleDir,
		workDirs:  []string{home, tmp},
		sandboxed: e.sandbox != nil,
		logW:      &lockedLog{sink: sink, logger: logger},
		tail:      newTailBuffer(stderrTailSize),
		exited:    make(chan struct{}),
		drained:   make(chan struct{}),
		aborted:   make(chan struct{}),
		clock:     clock,
	}
	env := e.environ(&inv.Envelope, inv.Spec.Env, home, tmp)
	path, args := program, append([]string(nil), inv.Spec.Exec...)
	lim := e.limitsOf(inv.Spec.Resources)
	res := &lim.res
	if e.cgroup != nil && (res.MemoryBytes > 0 || res.CPU > 0 || res.Pids > 0) {
		cg, err := e.cgroup.create("attempt-"+randomHex(8), res)
		if err != nil {
			return &Error{Message: "the step sets resources, and this server could not make the attempt's cgroup: " + err.Error(),
				Retryable: true, Code: CodeIsolationUnavailable}
		}
		defer func() {
			if err := cg.remove(); err != nil {
				logger.Warn("exec: remove the attempt's cgroup", "error", err)
			}
		}()
		r.cgroup = cg
	} else if res.CPU > 0 {
		_ = r.logW.write([]byte("[cairn: resources.cpu is not enforced on this server: it limits handlers with rlimits, not cgroups]\n"))
	}
	// A sandbox holds (bwrap waits before the handler: holdSandbox) while
	// its rlimits are set and, without the pool, its network connected.
	var rlimits []rlimit
	hold := connectAfterStart
	if e.sandbox != nil {
		rlimits = lim.rlimits(r.cgroup != nil)
		hold = hold || len(rlimits) > 0
		args = e.sandbox.command(sandboxSpec{
			bundleDir: bundleDir,
			inputs:    inputFiles(&inv.Envelope),
			workDirs:  []string{home, tmp},
			network:   netModeOf(pooled, network),
			hold:      hold,
			argv:      append([]string{program}, inv.Spec.Exec[1:]...),
		})
		path = args[0]
	} else if path, args, err = e.limitCommand(lim, r.cgroup != nil, path, args); err != nil {
		return err
	}
	r.resources = res
	clock.lap(PhasePrepare)
	var netns *pooledNetns
	if pooled {
		netns, err = e.sandbox.pool.get(ctx, inv.Envelope.Workflow, inv.Spec.NoNetwork, inv.Spec.AllowPorts)
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return &Error{Message: "exec: " + err.Error(), Retryable: true, Code: CodeIsolationUnavailable}
		}
		// Back to the pool once the attempt is over, if nothing of it is left
		// in the namespace: bwrap exited by itself, which it does only once the
		// sandbox's init has ended, and the kernel ends every process of a
		// PID namespace before its init. After a kill, bwrap's init may still
		// be on its way out: the namespace is thrown away.
		defer func() {
			e.sandbox.pool.put(netns, r.cmd != nil && r.cmd.ProcessState != nil && r.cmd.ProcessState.Exited())
		}()
		clock.lap(PhaseNetwork)
	}
	for try := 1; ; try++ {
		cmd := &exec.Cmd{
			Path:        path,
			Args:        args,
			Dir:         bundleDir,
			Env:         env,
			SysProcAttr: handlerProcAttr(),
		}
		if r.cgroup != nil {
			intoCgroup(cmd.SysProcAttr, r.cgroup.fd)
		}
		if e.sandbox != nil {
			if r.sandboxPipes, err = e.sandbox.pipes(hold); err != nil {
				return err
			}
		}
		var ns *os.File
		if netns != nil {
			ns = netns.ns
		}
		err := r.start(ctx, cmd, payload, ns)
		if err == nil {
			clock.lap(PhaseSpawn)
			if inv.Started != nil {
				inv.Started()
			}
			break
		}
		r.sandboxPipes.closeParent()
		// ETXTBSY: a fork elsewhere in this process (another attempt starting)
		// briefly holds a write descriptor of a file just written (a bundle being
		// extracted). It passes within milliseconds (golang/go#22315).
		if !errors.Is(err, syscall.ETXTBSY) || try == startTries {
			return err
		}
		timer := time.NewTimer(time.Duration(try) * 10 * time.Millisecond)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return context.Cause(ctx)
		}
	}
	if hold {
		defer r.sandboxPipes.closeParent()
		sn, err := r.holdSandbox(ctx, rlimits, connectAfterStart, inv.Spec.AllowPorts)
		defer sn.close()
		if err != nil {
			// bwrap still waits on its block pipe: the handler never ran.
			r.signalGroup(syscall.SIGKILL)
			if ctx.Err() == nil {
				err = &Error{Message: "exec: " + err.Error(), Retryable: true, Code: CodeIsolationUnavailable}
			}
			r.abort(err)
		}
		if connectAfterStart {
			clock.lap(PhaseNetwork)
		}
	}
	return r.supervise(ctx)
}

// holdSandbox readies a started sandbox, which waits before its handler: it
// sets the rlimits of the sandbox's init (the handler and its children
// inherit them; no prlimit process is needed), gives it its network when
// connect says so (exec_sandbox_net.go), and lets bwrap start the handler.
func (r *execRun) holdSandbox(ctx context.Context, rlimits []rlimit, connect bool, allow []int) (*sandboxNet, error) {
	s := r.exec.sandbox
	pid, err := readSandboxInfo(ctx, r.sandboxPipes.info)
	if err != nil {
		return nil, err
	}
	if err := setRlimits(pid, rlimits); err != nil {
		return nil, err
	}
	var sn *sandboxNet
	if connect {
		if sn, err = s.network.connectSandbox(ctx, pid, s.rootless, allow, r.exec.metrics); err != nil {
			return nil, err
		}
	}
	return sn, release(r.sandboxPipes.block)
}

// netModeOf is how a sandbox gets its network namespace: from the pool, or
// made by bwrap and connected after (network) or left empty.
func netModeOf(pooled, network bool) netMode {
	switch {
	case pooled:
		return netJoined
	case network:
		return netPasta
	}
	return netEmpty
}

// environ builds a handler's environment. Later entries win (os/exec keeps the
// last value of a duplicate key), so ExtraEnv and then the step's env override
// the base but not CAIRN_*.
func (e *Exec) environ(env *Envelope, stepEnv []string, home, tmp string) []string {
	out := make([]string, 0, len(e.baseEnv)+len(e.extraEnv)+len(stepEnv)+8)
	out = append(out, e.baseEnv...)
	out = append(out, "HOME="+home, "TMPDIR="+tmp)
	out = append(out, e.extraEnv...)
	if env.Traceparent != "" {
		out = append(out, "TRACEPARENT="+env.Traceparent)
	}
	out = append(out, stepEnv...)
	return append(out,
		"CAIRN_RUN_ID="+env.RunID,
		"CAIRN_STEP="+env.Step,
		"CAIRN_ATTEMPT="+strconv.Itoa(env.Attempt),
		"CAIRN_WORKFLOW="+env.Workflow,
		"CAIRN_VERSION="+strconv.Itoa(env.Version),
		EnvControlFD+"="+strconv.Itoa(controlFD),
	)
}

// resolveProgram finds argv[0] inside bundleDir and returns its real path and
// the bundle directory's real path, both absolute. Every failure that a retry
// cannot fix is a terminal *Error.
func resolveProgram(bundleDir string, argv []string) (program, root string, err error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", "", invalidSpecf("exec: no program given")
	}
	if bundleDir == "" {
		return "", "", errors.New("exec: invocation has no bundle directory")
	}
	name := argv[0]
	if filepath.IsAbs(name) {
		return "", "", invalidSpecf("exec: program %q must be a path inside the bundle, not absolute", name)
	}
	rel := filepath.Clean(name)
	if !filepath.IsLocal(rel) {
		return "", "", invalidSpecf("exec: program %q leaves the bundle", name)
	}
	// Absolute, or os/exec would resolve a relative program against cmd.Dir.
	abs, err := filepath.Abs(bundleDir)
	if err != nil {
		return "", "", fmt.Errorf("exec: resolve bundle directory %q: %w", bundleDir, err)
	}
	root, err = filepath.EvalSymlinks(abs)
	if err != nil {
		return "", "", fmt.Errorf("exec: resolve bundle directory %q: %w", bundleDir, err)
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return "", "", invalidSpecf("exec: program %q not found in the bundle", name)
	}
	if err != nil {
		return "", "", fmt.Errorf("exec: resolve program %q: %w", name, err)
	}
	if within, err := filepath.Rel(root, real); err != nil || !filepath.IsLocal(within) {
		return "", "", invalidSpecf("exec: program %q leaves the bundle", name)
	}
	info, err := os.Stat(real)
	if err != nil {
		return "", "", fmt.Errorf("exec: stat program %q: %w", name, err)
	}
	if !info.Mode().IsRegular() {
		return "", "", invalidSpecf("exec: program %q is not a regular file", name)
	}
	if info.Mode().Perm()&0o111 == 0 {
		return "", "", invalidSpecf("exec: program %q is not executable", name)
	}
	return real, root, nil
}

// execRun is the state of one running attempt.
type execRun struct {
	exec      *Exec
	sink      Sink
	logger    *slog.Logger
	bundleDir string
	// workDirs are the handler's HOME and TMPDIR.
	workDirs []string
	// sandboxed says the process is bubblewrap running the handler.
	sandboxed bool
	// sandboxPipes are the sandbox's setup pipes; nil unsandboxed.
	sandboxPipes *sandboxPipes
	logW         *lockedLog
	tail         *tailBuffer
	cmd          *exec.Cmd
	// resources are the handler's limits (nil: none).
	resources *Resources
	// cgroup is the attempt's cgroup, which enforces resources; nil: rlimits
	// do, or there are none.
	cgroup *attemptCgroup

	// Parent ends of the pipes.
	stdinW                  *os.File
	stdout, stderr, control *pipeReader
	stdinDone               chan struct{}

	// exited is closed when the process has exited; it is not reaped yet, so its
	// PID and process group ID cannot be reused while we signal the group.
	exited chan struct{}
	// drained is closed when stdout, stderr and the control pipe are all done.
	drained chan struct{}

	// aborted is closed by abort; abortErr is set before.
	abortOnce sync.Once
	aborted   chan struct{}
	abortErr  error

	// fnErr is the last error control message.
	mu    sync.Mutex
	fnErr *Error

	// clock times the attempt's phases.
	clock *phaseClock
}

// start creates the pipes, starts the process (in the network namespace netns,
// unless nil) and the goroutines that feed its stdin, read its outputs and
// watch for its exit.
func (r *execRun) start(ctx context.Context, cmd *exec.Cmd, payload []byte, netns *os.File) error {
	var parentEnds, childEnds []*os.File
	closeAll := func(files []*os.File) {
		for _, f := range files {
			_ = f.Close()
		}
	}
	pipe := func() (rd, wr *os.File, err error) {
		rd, wr, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("exec: create pipe: %w", err)
		}
		return rd, wr, nil
	}
	stdinR, stdinW, err := pipe()
	if err != nil {
		return err
	}
	parentEnds, childEnds = append(parentEnds, stdinW), append(childEnds, stdinR)
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		closeAll(parentEnds)
		closeAll(childEnds)
		return err
	}
	parentEnds, childEnds = append(parentEnds, stdoutR), append(childEnds, stdoutW)
	stderrR, stderrW, err := pipe()
	if err != nil {
		closeAll(parentEnds)
		closeAll(childEnds)
		return err
	}
	parentEnds, childEnds = append(parentEnds, stderrR), append(childEnds, stderrW)
	controlR, controlW, err := pipe()
	if err != nil {
		closeAll(parentEnds)
		closeAll(childEnds)
		return err
	}
	parentEnds, childEnds = append(parentEnds, controlR), append(childEnds, controlW)

	// *os.File values are handed to the child as they are: os/exec starts no
	// copying goroutines of its own, and Wait never waits for the pipes.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdinR, stdoutW, stderrW
	cmd.ExtraFiles = []*os.File{controlW}
	if r.sandboxPipes != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, r.sandboxPipes.child...)
	}
	var startErr error
	if netns != nil {
		startErr = startInNetns(cmd, netns)
	} else {
		startErr = startOnForkThread(cmd)
	}
	// The child holds its own copies; ours must go or EOF never comes.
	closeAll(childEnds)
	if r.sandboxPipes != nil {
		r.sandboxPipes.closeChild()
	}
	if startErr != nil {
		closeAll(parentEnds)
		return startError(cmd.Args[0], startErr)
	}
	r.cmd = cmd
	r.stdinW = stdinW
	r.stdout = newPipeReader(stdoutR, "stdout")
	r.stderr = newPipeReader(stderrR, "stderr")
	r.control = newPipeReader(controlR, "control")
	r.logger.DebugContext(ctx, "exec started", "pid", cmd.Process.Pid, "program", cmd.Args[0])

	go r.waitExit(cmd.Process.Pid)
	r.stdinDone = make(chan struct{})
	go r.writeStdin(payload)

	var readers sync.WaitGroup
	readers.Add(3)
	go func() {
		defer readers.Done()
		r.copyStdout()
	}()
	go func() {
		defer readers.Done()
		r.copyStderr()
	}()
	go func() {
		defer readers.Done()
		r.readControl(ctx)
	}()
	go func() {
		readers.Wait()
		close(r.drained)
	}()
	return nil
}

// startError classifies a failed start: a program the kernel refuses to execute
// (bad interpreter, no permission, not an executable format) is terminal; the
// rest (out of processes, file descriptors, memory) is infrastructure.
func startError(name string, err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		switch errno {
		case syscall.ENOENT, syscall.EACCES, syscall.ENOEXEC, syscall.ENOTDIR, syscall.EISDIR, syscall.ELOOP:
			return invalidSpecf("exec: start %q: %v", name, err)
		}
	}
	return fmt.Errorf("exec: start %q: %w", name, err)
}

// waitExit closes r.exited when the process has exited, without reaping it
// (WNOWAIT): until cmd.Wait reaps it, its PID, and so its process group ID, stay
// taken, and signalling the group can never reach an unrelated process.
func (r *execRun) waitExit(pid int) {
	defer close(r.exited)
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			// ECHILD cannot happen while we hold the unreaped child; if it does,
			// cmd.Wait reports it.
			r.logger.Warn("wait for exec exit", "pid", pid, "error", err)
		}
		return
	}
}

// writeStdin writes the envelope to the handler's stdin and closes it. A handler
// that exits or closes stdin without reading it is fine: EPIPE is ignored, and
// the write is cut short (deadline) when the attempt ends.
func (r *execRun) writeStdin(payload []byte) {
	defer close(r.stdinDone)
	_, err := r.stdinW.Write(payload)
	if err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, os.ErrDeadlineExceeded) {
		r.logger.Debug("write envelope to stdin", "error", err)
	}
	if err := r.stdinW.Close(); err != nil && !errors.Is(err, syscall.EPIPE) {
		r.logger.Debug("close stdin", "error", err)
	}
}

// abort stops the attempt with err (lease lost, output refused).
func (r *execRun) abort(err error) {
	r.abortOnce.Do(func() {
		r.abortErr = err
		close(r.aborted)
	})
}

// abortError returns the abort's error, or nil when there was none.
func (r *execRun) abortError() error {
	select {
	case <-r.aborted:
		return r.abortErr
	default:
		return nil
	}
}

// copyStdout streams stdout into the sink's output, chunk by chunk. A failed
// write aborts the attempt (the handler would block on a full pipe otherwise).
func (r *execRun) copyStdout() {
	out := r.sink.Output()
	buf := make([]byte, copyBufferSize)
	grown := false
	for {
		n, err := r.stdout.Read(buf)
		if n > 0 {
			if _, werr := out.Write(buf[:n]); werr != nil {
				r.abort(sinkWriteError("exec: write output", werr))
				return
			}
		}
		if n == len(buf) && !grown {
			// More than a small output: the rest moves in large pieces. Only
			// then, so that small outputs keep the default pipe (a user's pipes
			// share a quota, past which new pipes get a single page).
			buf, grown = make([]byte, outputReadSize), true
			growPipe(r.stdout.f)
		}
		if err != nil {
			// io.EOF, or the pipe was cut.
			return
		}
	}
}

// copyStderr streams stderr into the sink's log and keeps its tail for the
// failure message. A log that fails stops being written; the tail is still kept.
func (r *execRun) copyStderr() {
	buf := make([]byte, copyBufferSize)
	for {
		n, err := r.stderr.Read(buf)
		if n > 0 {
			r.tail.Write(buf[:n])
			if werr := r.logW.write(buf[:n]); werr != nil && errors.Is(werr, ErrLeaseLost) {
				r.abort(werr)
			}
		}
		if err != nil {
			return
		}
	}
}

// setFunctionError remembers an error control message.
func (r *execRun) setFunctionError(e *Error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fnErr = e
}

func (r *execRun) functionError() *Error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fnErr
}

// signalGroup sends sig to the handler's process group and to the handler itself
// (in case it moved to another group). The handler is not reaped before the
// attempt ends, so its PID cannot have been reused.
func (r *execRun) signalGroup(sig syscall.Signal) {
	pid := r.cmd.Process.Pid
	if err := syscall.Kill(-pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.logger.Warn("signal exec process group", "pid", pid, "signal", sig.String(), "error", err)
	}
	if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.logger.Warn("signal exec process", "pid", pid, "signal", sig.String(), "error", err)
	}
}

// terminate sends SIGTERM to the group and waits until the handler has exited
// and its pipes are closed, or KillGrace has passed.
func (r *execRun) terminate() {
	r.signalGroup(syscall.SIGTERM)
	timer := time.NewTimer(r.exec.killGrace)
	defer timer.Stop()
	exited, drained := r.exited, r.drained
	for exited != nil || drained != nil {
		select {
		case <-exited:
			exited = nil
		case <-drained:
			drained = nil
		case <-timer.C:
			return
		}
	}
}

// supervise waits for the attempt to end (exit, ctx, abort), kills what is left
// of the process group, drains or cuts the pipes, reaps the handler and returns
// Invoke's result.
func (r *execRun) supervise(ctx context.Context) error {
	var stopErr error
	select {
	case <-r.exited:
		r.clock.lap(PhaseRun)
		stopErr = r.awaitRelease(ctx)
	case <-ctx.Done():
		r.clock.lap(PhaseRun)
		stopErr = context.Cause(ctx)
		r.terminate()
	case <-r.aborted:
		r.clock.lap(PhaseRun)
		stopErr = r.abortErr
		r.terminate()
	}

	// Nothing of the attempt may outlive it.
	r.signalGroup(syscall.SIGKILL)
	stopErr = r.drain(ctx, stopErr)
	_ = r.stdinW.SetWriteDeadline(time.Now())
	<-r.stdinDone
	for _, p := range r.pipes() {
		_ = p.f.Close()
	}

	<-r.exited
	waitErr := r.cmd.Wait()
	r.exec.metrics.addCPU(CPUHandler, r.cmd.ProcessState)
	r.clock.lap(PhaseDrain)
	if stopErr == nil {
		stopErr = r.abortError()
	}
	if stopErr != nil {
		r.logger.DebugContext(ctx, "exec stopped", "error", stopErr)
		return stopErr
	}
	return r.result(waitErr)
}

// awaitRelease waits, once the handler has exited by itself, until nobody
// writes to its pipes any more: a background child may still hold stdout, and
// gets KillGrace to finish before the group is killed. A slow reader is no
// reason to wait: the pipes are drained after the kill. It returns what stopped
// the attempt meanwhile (ctx, abort), or nil.
func (r *execRun) awaitRelease(ctx context.Context) error {
	timer := time.NewTimer(r.exec.killGrace)
	defer timer.Stop()
	tick := time.NewTicker(pipePollInterval)
	defer tick.Stop()
	for {
		select {
		case <-r.drained:
			return nil
		case <-tick.C:
			if len(r.heldPipes()) == 0 {
				return nil
			}
		case <-timer.C:
			r.logger.DebugContext(ctx, "exec pipes still open after exit; killing the process group")
			return nil
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-r.aborted:
			return r.abortErr
		}
	}
}

// drain waits, once the process group was killed, until stdout, stderr and the
// control pipe are read to their end. It returns stopErr, or else what stopped
// the attempt meanwhile (ctx, abort).
//
// A pipe without writers is read to its end however long the Sink takes (a
// checkpoint retrying against the blob store): the handler's last lines, its
// error message among them, may still be in it. Only a pipe that still has a
// writer pipeCloseDelay after the kill is cut, with a warning: a process that
// left the group holds it, and it may never end; what it holds then is still
// read. Once the attempt is stopped (ctx, abort), every pipe is cut after
// pipeCloseDelay: what is left in them cannot change Invoke's result.
func (r *execRun) drain(ctx context.Context, stopErr error) error {
	timer := time.NewTimer(pipeCloseDelay)
	defer timer.Stop()
	ctxDone, aborted := ctx.Done(), r.aborted
	late, heldCut, allCut := false, false, false
	for {
		select {
		case <-r.drained:
			return stopErr
		case <-timer.C:
			late = true
		case <-ctxDone:
			ctxDone = nil
			if stopErr == nil {
				stopErr = context.Cause(ctx)
			}
		case <-aborted:
			aborted = nil
			if stopErr == nil {
				stopErr = r.abortErr
			}
		}
		if !late {
			continue
		}
		if !heldCut {
			heldCut = true
			if held := r.heldPipes(); len(held) > 0 {
				names := make([]string, len(held))
				for i, p := range held {
					names[i] = p.name
					p.cutOff(pipeCutHeld)
				}
				r.logger.WarnContext(ctx, "exec pipes held open by a process outside the group; closing them",
					"pipes", strings.Join(names, ","))
			}
		}
		if stopErr != nil && !allCut {
			allCut = true
			for _, p := range r.pipes() {
				p.cutOff(pipeCutNow)
			}
		}
	}
}

// pipes returns the pipes the handler writes to.
func (r *execRun) pipes() []*pipeReader {
	return []*pipeReader{r.stdout, r.stderr, r.control}
}

// heldPipes returns the pipes some process still writes to.
func (r *execRun) heldPipes() []*pipeReader {
	var held []*pipeReader
	for _, p := range r.pipes() {
		if p.hasWriter() {
			held = append(held, p)
		}
	}
	return held
}

// result turns the handler's exit into Invoke's result.
func (r *execRun) result(waitErr error) error {
	fnErr := r.functionError()
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return fmt.Errorf("exec: wait: %w", waitErr)
	}
	if waitErr == nil {
		if fnErr != nil {
			return fnErr
		}
		return nil
	}
	if fnErr != nil {
		return fnErr
	}
	failure := &Error{Retryable: true, Code: CodeExitStatus}
	ws, _ := exitErr.Sys().(syscall.WaitStatus)
	sig, signaled := ws.Signal(), ws.Signaled()
	if code := exitErr.ExitCode(); r.sandboxed && code > 128 && code <= 128+64 {
		// bubblewrap exits with 128+n when the handler was killed by signal n (so
		// does a handler that exits with such a status itself: the two look alike).
		sig, signaled = syscall.Signal(code-128), true
	}
	if signaled {
		failure.Code = CodeSignal
		failure.Message = fmt.Sprintf("killed by signal %d (%s)", int(sig), sig)
	} else {
		failure.Message = fmt.Sprintf("exit status %d", exitErr.ExitCode())
	}
	tail := r.tail.String()
	if tail != "" {
		failure.Message += "; stderr: " + tail
	}
	if r.cgroup != nil && r.resources.MemoryBytes > 0 {
		if kills := r.cgroup.oomKills(); kills > 0 {
			return cgroupFailure(r.resources, kills, failure)
		}
	}
	return resourceFailure(r.resources, failure, tail)
}

// inputFiles lists the local files of the $blob references in an envelope: the
// only files outside its bundle and directories a sandboxed handler may read.
func inputFiles(env *Envelope) []string {
	var out []string
	add := func(v json.RawMessage) {
		if ref, ok := blobstore.ParseRef(v); ok && ref.Path != "" {
			out = append(out, ref.Path)
		}
	}
	for _, v := range env.Deps {
		add(v)
	}
	add(env.Checkpoint)
	slices.Sort(out)
	return slices.Compact(out)
}

// forkThread runs the function it is sent on one OS thread that is locked to its
// goroutine for the life of the process. The parent-death signal (Linux) is tied
// to the thread that forks, not to the process: Go ends a thread when a goroutine
// that locked it returns without unlocking (as some libraries and test helpers
// do, to tie their own children to that goroutine), and any thread may be the one
// such a goroutine locks. A handler forked on an ordinary thread could thus be
// SIGKILLed in mid-attempt; one forked on this thread dies only with the process.
var forkThread = sync.OnceValue(func() chan<- func() {
	ch := make(chan func())
	go func() {
		runtime.LockOSThread() // never unlocked: the goroutine never returns
		for f := range ch {
			f()
		}
	}()
	return ch
})

// startOnForkThread starts cmd on the fork thread.
func startOnForkThread(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	forkThread() <- func() { done <- cmd.Start() }
	return <-done
}
