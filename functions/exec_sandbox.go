package functions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Isolation says how exec handlers are kept from the server (ExecConfig.Isolation).
type Isolation string

const (
	// IsolationBwrap runs every handler in a sandbox made by bubblewrap (bwrap): its
	// own PID, mount, IPC and UTS namespaces, so it sees no process of the server
	// (no /proc/$PPID/environ) and no file but the bundle (read-only: a bind mount
	// that root inside cannot undo), its own inputs (read-only), a private HOME and
	// TMPDIR, and the system's /usr and /etc (read-only). A server running as root
	// runs handlers as an unprivileged uid (ExecConfig.SandboxUID, default 65534,
	// nobody); a server running as another user runs them as its own uid inside a
	// user namespace, where they have no capability and still see nothing of the
	// server. Each handler has a network namespace of its own, connected to the
	// outside by pasta with no route to this host (exec_sandbox_net.go), or empty
	// with network: none; a seccomp filter (exec_sandbox_seccomp.go); and, unless
	// its step says otherwise, the default bounds of exec_resources.go. When bwrap
	// is missing or does not work here, exec attempts fail with
	// CodeIsolationUnavailable: the server never falls back to running them
	// unisolated.
	IsolationBwrap Isolation = "bwrap"
	// IsolationNone runs handlers as the server's own user with no isolation: they
	// can read whatever the server can, its environment included. For development
	// on a machine without bubblewrap, and for operators who isolate the whole
	// server otherwise; never the default of `cairn serve`.
	IsolationNone Isolation = "none"
)

// CodeIsolationUnavailable is an exec attempt on a server that must isolate
// handlers but cannot (bubblewrap missing or refused by the kernel). Retryable: a
// retry may land on another server; the step's retry policy bounds it.
const CodeIsolationUnavailable = "isolation_unavailable"

// DefaultSandboxUID is ExecConfig.SandboxUID's default: nobody.
const DefaultSandboxUID = 65534

// ParseIsolation reads an isolation mode ("bwrap" or "none").
func ParseIsolation(s string) (Isolation, error) {
	switch Isolation(s) {
	case IsolationBwrap, IsolationNone:
		return Isolation(s), nil
	}
	return "", fmt.Errorf("exec isolation %q: want bwrap or none", s)
}

// sandbox builds the bwrap command lines of one server.
type sandbox struct {
	bwrap string
	// setpriv drops to uid/gid inside the sandbox when the server is root (bwrap
	// itself can only change the uid inside a user namespace, where root outside
	// stays root).
	setpriv  string
	uid, gid int
	rootless bool
	// seccomp is the filter handed to bwrap (exec_sandbox_seccomp.go).
	seccomp []byte
	// network connects handlers' namespaces to the outside (exec_sandbox_net.go).
	network sandboxNetwork
	// pool holds the network namespaces handlers join (root servers;
	// exec_sandbox_netpool.go); nil: each sandbox makes its own.
	pool *netPool
	// systemArgs bind systemDirs, as they were when the server started
	// (systemBinds): every sandbox has them, and they do not change.
	systemArgs []string
}

// File descriptors of bwrap beside the handler's control pipe (3): the seccomp
// filter it loads, the pipe it writes the sandbox's pid to, and the one it
// waits on before it starts the handler (when the invoker sets up the
// sandbox's network first).
const (
	seccompFD = 4
	infoFD    = 5
	blockFD   = 6
)

// systemDirs are bound read-only into every sandbox, when they exist. /bin, /lib
// and friends are bound as they are: directories, or symbolic links into /usr.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// newSandbox finds bwrap (and setpriv when root) and runs a trivial sandbox once,
// so that a kernel without the namespaces bwrap needs is found at start-up.
func newSandbox(ctx context.Context, uid int, m *execMetrics) (*sandbox, error) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		return nil, errors.New("bubblewrap (bwrap) is not installed: install it (Debian: apt-get install bubblewrap) or set CAIRN_EXEC_ISOLATION=none to run exec handlers unisolated")
	}
	s := &sandbox{bwrap: bwrap, uid: uid, gid: uid, rootless: os.Geteuid() != 0, systemArgs: systemBinds()}
	s.network = findSandboxNetwork(s.rootless)
	if s.seccomp, err = seccompProgram(); err != nil {
		return nil, err
	}
	if !s.rootless {
		if s.setpriv, err = exec.LookPath("setpriv"); err != nil {
			return nil, errors.New("setpriv (util-linux) is not installed: a root server needs it to run handlers as an unprivileged user")
		}
		s.pool = newNetPool(&s.network, m)
	}
	tmp, err := os.MkdirTemp("", "cairn-sandbox-probe-")
	if err != nil {
		return nil, fmt.Errorf("probe bubblewrap: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := s.prepareDir(tmp); err != nil {
		return nil, fmt.Errorf("probe bubblewrap: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	argv := s.command(sandboxSpec{bundleDir: tmp, workDirs: []string{tmp}, argv: []string{"/bin/sh", "-c", "exit 0"}, network: netEmpty})
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	filter, err := s.seccompFile()
	if err != nil {
		return nil, fmt.Errorf("probe bubblewrap: %w", err)
	}
	defer filter.Close()
	// ExtraFiles[i] is descriptor 3+i; 3 (the control pipe) is unused here.
	cmd.ExtraFiles = []*os.File{nil, filter}
	// Started on the fork thread, as handlers are: bwrap's --die-with-parent
	// follows the thread that forked it, and a thread that ends (a goroutine
	// that locked it returned) would kill the probe (startOnForkThread).
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = startOnForkThread(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return nil, fmt.Errorf("bubblewrap does not work here (%v: %s); set CAIRN_EXEC_ISOLATION=none to run exec handlers unisolated", err, strings.TrimSpace(out.String()))
	}
	return s, nil
}

// describe says how handlers run, for logs and readiness: the user, and how
// they get a network.
func (s *sandbox) describe() string {
	how := "bubblewrap, as uid " + strconv.Itoa(s.uid)
	if s.rootless {
		how = "bubblewrap, in a user namespace as the server's uid"
	}
	if s.network.err != nil {
		return how + "; network: none only (" + s.network.err.Error() + ")"
	}
	if s.pool != nil {
		return how + "; network: a namespace of its own (pooled) through pasta, no route to this host"
	}
	return how + "; network: own namespace through pasta, no route to this host"
}

// prepareDir hands a directory the handler writes (its HOME, TMPDIR) to the
// handler's uid.
func (s *sandbox) prepareDir(dir string) error {
	if s.rootless {
		return nil
	}
	return os.Chown(dir, s.uid, s.gid)
}

// sandboxSpec is what one attempt's sandbox contains. Every path is bound at the
// same path inside, so that paths in the envelope and in control messages mean
// the same inside and out.
type sandboxSpec struct {
	bundleDir string   // read-only; the working directory
	inputs    []string // files, read-only
	workDirs  []string // read-write (HOME, TMPDIR)
	network   netMode
	// hold: bwrap reports its sandbox's pid (infoFD) and waits (blockFD)
	// before the handler, while the invoker sets its rlimits and connects its
	// network (netPasta).
	hold bool
	argv []string // the program (an absolute path) and its arguments
}

// netMode is how a sandbox gets its network namespace.
type netMode int

const (
	// netEmpty: bwrap makes a namespace with nothing but its loopback
	// (network: none on a server without the pool).
	netEmpty netMode = iota
	// netPasta: bwrap makes a namespace and waits (hold) until the invoker
	// has connected it through pasta.
	netPasta
	// netJoined: the sandbox stays in the namespace bwrap was started in: a
	// pooled one (exec_sandbox_netpool.go).
	netJoined
)

// command returns the argv that runs spec.argv in a sandbox.
func (s *sandbox) command(spec sandboxSpec) []string {
	args := []string{s.bwrap,
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		// Handlers die with the server: bwrap's init in the sandbox gets SIGKILL
		// when bwrap dies (which gets it when the server dies), and with the init
		// of its PID namespace the kernel kills every process in it.
		"--die-with-parent",
		"--seccomp", strconv.Itoa(seccompFD),
	}
	if s.rootless {
		// --disable-userns: no user namespace inside (the seccomp filter refuses
		// them on a root server, where bwrap makes none).
		args = append(args, "--unshare-user", "--disable-userns", "--uid", strconv.Itoa(s.uid), "--gid", strconv.Itoa(s.gid))
	}
	if spec.network != netJoined {
		args = append(args, "--unshare-net")
	}
	if spec.hold || spec.network == netPasta {
		args = append(args, "--info-fd", strconv.Itoa(infoFD), "--block-fd", strconv.Itoa(blockFD))
	}
	args = append(args, s.systemArgs...)
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--tmpfs", "/run")
	// bwrap makes missing parents of a mount point private (0700); the handler's
	// uid must be able to walk to its files.
	made := map[string]bool{"/": true, "/tmp": true, "/run": true}
	parents := func(p string) {
		var chain []string
		for d := filepath.Dir(p); !made[d]; d = filepath.Dir(d) {
			chain = append(chain, d)
			made[d] = true
		}
		for i := len(chain) - 1; i >= 0; i-- {
			args = append(args, "--perms", "0755", "--dir", chain[i])
		}
	}
	bind := func(flag, p string) {
		parents(p)
		made[p] = true
		args = append(args, flag, p, p)
	}
	bind("--ro-bind", spec.bundleDir)
	for _, p := range spec.inputs {
		bind("--ro-bind", p)
	}
	for _, p := range spec.workDirs {
		bind("--bind", p)
	}
	args = append(args, "--chdir", spec.bundleDir, "--")
	if !s.rootless {
		args = append(args, s.setpriv, "--reuid", strconv.Itoa(s.uid), "--regid", strconv.Itoa(s.gid),
			"--clear-groups", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all")
	}
	return append(args, spec.argv...)
}

// systemBinds returns bwrap's arguments that bind systemDirs read-only: each
// that exists, as a directory or as the symbolic link it is.
func systemBinds() []string {
	var args []string
	for _, d := range systemDirs {
		info, err := os.Lstat(d)
		switch {
		case err != nil:
		case info.Mode()&os.ModeSymlink != 0:
			if target, err := os.Readlink(d); err == nil {
				args = append(args, "--symlink", target, d)
			}
		case info.IsDir():
			args = append(args, "--ro-bind", d, d)
		}
	}
	return args
}

// seccompFile returns a pipe holding the seccomp filter, to hand to bwrap as
// seccompFD. The filter is far smaller than a pipe's buffer.
func (s *sandbox) seccompFile() (*os.File, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	defer w.Close()
	if _, err := w.Write(s.seccomp); err != nil {
		r.Close()
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return r, nil
}

// sandboxPipes are the setup pipes of one sandbox: bwrap's ends (ExtraFiles after
// the control pipe: seccompFD, infoFD, blockFD) and the invoker's.
type sandboxPipes struct {
	child []*os.File
	// info and block are the invoker's ends of the info and block pipes; nil
	// with network: none.
	info, block *os.File
}

// pipes makes the setup pipes of one sandbox: the info and block pipes too
// when it holds (sandboxSpec.hold).
func (s *sandbox) pipes(hold bool) (*sandboxPipes, error) {
	filter, err := s.seccompFile()
	if err != nil {
		return nil, err
	}
	p := &sandboxPipes{child: []*os.File{filter}}
	if !hold {
		return p, nil
	}
	infoR, infoW, err := os.Pipe()
	if err != nil {
		p.closeChild()
		return nil, fmt.Errorf("sandbox: create pipe: %w", err)
	}
	blockR, blockW, err := os.Pipe()
	if err != nil {
		p.closeChild()
		infoR.Close()
		infoW.Close()
		return nil, fmt.Errorf("sandbox: create pipe: %w", err)
	}
	p.child = append(p.child, infoW, blockR)
	p.info, p.block = infoR, blockW
	return p, nil
}

// closeChild closes bwrap's ends, once bwrap has its own copies (or did not start).
func (p *sandboxPipes) closeChild() {
	for _, f := range p.child {
		_ = f.Close()
	}
}

// closeParent closes the invoker's ends (none when p is nil: no sandbox).
func (p *sandboxPipes) closeParent() {
	if p == nil {
		return
	}
	for _, f := range []*os.File{p.info, p.block} {
		if f != nil {
			_ = f.Close()
		}
	}
}
