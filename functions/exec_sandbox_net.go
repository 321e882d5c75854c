package functions

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The network of a sandboxed handler. Every handler gets a network namespace of
// its own (bwrap --unshare-net). With network: none it stays empty but for its
// own loopback. Otherwise pasta (Debian's passt package) connects it to the
// outside: it copies the host's address and routes into the namespace and
// carries the handler's connections out through sockets of its own on the host,
// so that outbound TCP, UDP and DNS work as from the host, and:
//   - the host's loopback is not reachable: 127.0.0.1 and ::1 are the
//     namespace's own, and pasta runs with --no-map-gw (the gateway's address is
//     the real gateway, not the host) and forwards no port of the host (-T none,
//     -U none) but those a step allows (network: {allow: ["localhost:5432"]}:
//     -T 5432, the namespace's port 5432 forwarded to the host's loopback);
//   - the host's other addresses (a bridge, a second interface) and the
//     link-local range (169.254.0.0/16, cloud instance metadata; fd00:ec2::254,
//     its IPv6 twin) are routed to "unreachable" inside the namespace, so a
//     server listening on 0.0.0.0 is not reachable through them either;
//   - nothing of the namespace is reachable from outside (-t none, -u none);
//   - /proc/net inside lists the namespace's sockets only.
//
// The sequence per attempt: bwrap starts with --info-fd and --block-fd, so that
// it makes its namespaces and then waits; the invoker reads the sandbox's pid
// from the info pipe, opens its network namespace (and, when the server is not
// root, the user namespace that owns it), starts pasta on it, routes the
// unreachable ranges (nsenter + ip), and only then lets bwrap go on to the
// handler. pasta is the invoker's child, dies with it (parent-death signal), and
// is stopped when the attempt ends.

// sandboxNetwork is what a sandboxed handler's network needs on this server: the
// paths of pasta, nsenter and ip, or why they are missing.
type sandboxNetwork struct {
	pasta, nsenter, ip string
	// err says why handlers with network cannot run here (a tool missing); nil
	// when they can.
	err error
}

// metadataPrefixes are routed unreachable in every handler's namespace: the
// link-local range (cloud instance metadata at 169.254.169.254) and AWS's IPv6
// metadata address.
var metadataPrefixes = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
}

// findSandboxNetwork looks for pasta, nsenter and ip, and, when the server is
// not root (rootless), checks that it may open /dev/net/tun, where pasta makes
// the namespace's interface.
func findSandboxNetwork(rootless bool) sandboxNetwork {
	var n sandboxNetwork
	var missing []string
	find := func(name, pkg string, extra ...string) string {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		// sbin is not on every user's PATH (a server running as nobody).
		for _, p := range extra {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
		missing = append(missing, name+" ("+pkg+")")
		return ""
	}
	n.pasta = find("pasta", "passt", "/usr/bin/pasta", "/usr/local/bin/pasta")
	n.nsenter = find("nsenter", "util-linux", "/usr/bin/nsenter")
	n.ip = find("ip", "iproute2", "/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip")
	if len(missing) == 0 && rootless {
		if f, err := os.OpenFile("/dev/net/tun", os.O_RDWR, 0); err != nil {
			n.err = fmt.Errorf("handlers get their own network through pasta, which needs /dev/net/tun, and this server's user cannot open it (%v): make it mode 0666, as udev does (scripts/install-sandbox.sh), or give the step network: none", err)
		} else {
			f.Close()
		}
	}
	if len(missing) > 0 {
		n.err = fmt.Errorf("handlers get their own network through pasta, and this server lacks %s: install them (Debian: apt-get install passt util-linux iproute2; `make tools` does), or give the step network: none",
			strings.Join(missing, " and "))
	}
	return n
}

// sandboxNet is pasta serving one network namespace.
type sandboxNet struct {
	pasta *exec.Cmd
	// stderr holds what pasta printed, for errors.
	stderr *bytes.Buffer
	// exited is closed once pasta has ended and was reaped; waitErr is then
	// its Wait.
	exited  chan struct{}
	waitErr error
	dir     string
	// metrics count pasta's processor time when it ends.
	metrics *execMetrics
}

// sandboxInfo is what bwrap writes to its --info-fd.
type sandboxInfo struct {
	ChildPID int `json:"child-pid"`
}

// readSandboxInfo reads the pid of the sandbox (its init, as this server sees
// it) from bwrap's info pipe.
func readSandboxInfo(ctx context.Context, info *os.File) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var si sandboxInfo
		err := json.NewDecoder(bufio.NewReader(info)).Decode(&si)
		if err == nil && si.ChildPID <= 0 {
			err = errors.New("no child-pid")
		}
		ch <- result{si.ChildPID, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return 0, fmt.Errorf("read bubblewrap's sandbox info: %w", r.err)
		}
		return r.pid, nil
	case <-ctx.Done():
		_ = info.SetReadDeadline(time.Now()) // ends the decoder
		return 0, context.Cause(ctx)
	}
}

// connectSandbox gives the sandbox whose init is pid its network: pasta with
// the ports of allow (1 to 65535) forwarded to the host's loopback, and the unreachable
// routes. rootless says the namespace belongs to a user namespace of the
// server's (a server not running as root). The returned sandboxNet must be
// closed when the attempt ends.
func (n *sandboxNetwork) connectSandbox(ctx context.Context, pid int, rootless bool, allow []int, m *execMetrics) (*sandboxNet, error) {
	netns, userns, err := openSandboxNamespaces(pid, rootless)
	if err != nil {
		return nil, err
	}
	defer netns.Close()
	if userns != nil {
		defer userns.Close()
	}
	if err := awaitLoopback(ctx, pid); err != nil {
		return nil, err
	}
	if userns != nil {
		if err := awaitUserMap(ctx, pid, userns); err != nil {
			return nil, err
		}
	}
	return n.connectNetns(ctx, netns, userns, allow, m)
}

// connectNetns connects the network namespace netns (owned by userns, or,
// with userns nil, by the server's own user namespace) to the outside: the
// unreachable routes, then pasta with the ports of allow forwarded to the
// host's loopback. The returned sandboxNet must be closed when done.
func (n *sandboxNetwork) connectNetns(ctx context.Context, netns, userns *os.File, allow []int, m *execMetrics) (*sandboxNet, error) {
	if err := n.routeUnreachable(ctx, netns, userns, m); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "cairn-pasta-")
	if err != nil {
		return nil, fmt.Errorf("sandbox network: %w", err)
	}
	// pasta runs as a user that may not be the server's (nobody, when the server
	// is root and does not say --runas): it writes its pid file here.
	_ = os.Chmod(dir, 0o755)
	sn := &sandboxNet{dir: dir, stderr: &bytes.Buffer{}, metrics: m}
	tcp := "none"
	if len(allow) > 0 {
		s := make([]string, len(allow))
		for i, p := range allow {
			s[i] = strconv.Itoa(p)
		}
		tcp = strings.Join(s, ",")
	}
	pidFile := filepath.Join(dir, "pid")
	args := []string{n.pasta, "--foreground", "--quiet", "--config-net", "--no-map-gw",
		"--tcp-ports", "none", "--udp-ports", "none", "--tcp-ns", tcp, "--udp-ns", "none",
		"--pid", pidFile, "--netns", "/proc/self/fd/3"}
	files := []*os.File{netns}
	if userns != nil {
		args = append(args, "--userns", "/proc/self/fd/4")
		files = append(files, userns)
	} else {
		// pasta changes to nobody when started as root, before it joins the
		// namespace, which nobody may not: a root server's pasta stays root
		// (with only the capabilities pasta keeps for itself).
		args = append(args, "--runas", "0")
	}
	sn.pasta = &exec.Cmd{Path: n.pasta, Args: args, Env: []string{"PATH=/usr/bin:/bin"},
		Stderr: sn.stderr, Stdout: sn.stderr, ExtraFiles: files, SysProcAttr: handlerProcAttr()}
	if err := startOnForkThread(sn.pasta); err != nil {
		sn.pasta = nil
		sn.close()
		return nil, fmt.Errorf("sandbox network: start pasta: %w", err)
	}
	sn.exited = make(chan struct{})
	go func() {
		sn.waitErr = sn.pasta.Wait()
		close(sn.exited)
	}()
	// pasta writes its pid file once the namespace is configured.
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	for {
		if _, err := os.Stat(pidFile); err == nil {
			return sn, nil
		}
		select {
		case <-sn.exited:
			sn.close()
			return nil, fmt.Errorf("sandbox network: pasta ended (%v): %s", sn.waitErr, strings.TrimSpace(sn.stderr.String()))
		case <-deadline.C:
			sn.close()
			return nil, fmt.Errorf("sandbox network: pasta was not ready after 10s: %s", strings.TrimSpace(sn.stderr.String()))
		case <-ctx.Done():
			sn.close()
			return nil, context.Cause(ctx)
		case <-tick.C:
		}
	}
}

// alive reports whether pasta still serves the namespace.
func (sn *sandboxNet) alive() bool {
	select {
	case <-sn.exited:
		return false
	default:
		return true
	}
}

// awaitLoopback waits until bubblewrap has set up the namespace's loopback
// (127.0.0.1 on lo, up: a local route in /proc/<pid>/net/fib_trie). It does so
// after it reported the pid, with a request that fails if lo is up already:
// pasta, which brings lo up too, must come after.
func awaitLoopback(ctx context.Context, pid int) error {
	return poll(ctx, "the sandbox's loopback was not set up", func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/fib_trie", pid))
		return err == nil && bytes.Contains(b, []byte("127.0.0.1"))
	})
}

// poll calls done every millisecond until it reports true, ctx ends (its
// cause), or 10 s passed (an error saying what).
func poll(ctx context.Context, what string, done func() bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("sandbox network: %s within 10s", what)
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// awaitUserMap waits until the user namespace that owns the sandbox's network
// namespace has its uid map: bwrap's sandbox writes it after bwrap reported the
// pid, and until then the server's uid is nobody there (without the map, nsenter
// would get no capability in it). The map is there once the sandbox's init shows
// one (/proc/<pid>/uid_map), or has moved on into the nested user namespace of
// --disable-userns, which is made after it.
func awaitUserMap(ctx context.Context, pid int, userns *os.File) error {
	owner, err := userns.Stat()
	if err != nil {
		return fmt.Errorf("sandbox network: %w", err)
	}
	return poll(ctx, "the sandbox's user namespace got no uid map", func() bool {
		if m, err := os.ReadFile(fmt.Sprintf("/proc/%d/uid_map", pid)); err == nil && len(bytes.TrimSpace(m)) > 0 {
			return true
		}
		cur, err := os.Stat(fmt.Sprintf("/proc/%d/ns/user", pid))
		return err == nil && !os.SameFile(cur, owner)
	})
}

// routeUnreachable routes the metadata prefixes and the host's own addresses
// to "unreachable" inside the namespace.
func (n *sandboxNetwork) routeUnreachable(ctx context.Context, netns, userns *os.File, m *execMetrics) error {
	var batch strings.Builder
	for _, p := range unreachablePrefixes() {
		fmt.Fprintf(&batch, "route add unreachable %s\n", p)
	}
	args := []string{n.nsenter, "--net=/proc/self/fd/3"}
	files := []*os.File{netns}
	if userns != nil {
		// Into the user namespace that owns the network namespace, where the
		// server's uid is root (bwrap maps it to 0 there); keeping the
		// credentials, since that namespace refuses setgroups.
		args = append(args, "--user=/proc/self/fd/4", "--preserve-credentials")
		files = append(files, userns)
	}
	args = append(args, "--", n.ip, "-batch", "-")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = files
	cmd.Stdin = strings.NewReader(batch.String())
	out, err := cmd.CombinedOutput()
	m.addCPU(CPUNetwork, cmd.ProcessState)
	if err != nil {
		return fmt.Errorf("sandbox network: route the host's addresses unreachable: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// unreachablePrefixes are the metadata prefixes and every address of this host
// but loopback ones (a namespace's 127.0.0.1 is its own), as single-address
// prefixes.
func unreachablePrefixes() []netip.Prefix {
	out := slices.Clone(metadataPrefixes)
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		ip, ok := netip.AddrFromSlice(ipn.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ip.IsLoopback() || ip.IsLinkLocalUnicast() || ip.IsUnspecified() {
			// Link-local: 169.254.0.0/16 is listed already; IPv6 fe80::/10
			// addresses are per link, and a namespace's link reaches only pasta.
			continue
		}
		out = append(out, netip.PrefixFrom(ip, ip.BitLen()))
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	return slices.Compact(out)
}

// close stops pasta and removes its directory.
func (sn *sandboxNet) close() {
	if sn == nil {
		return
	}
	if sn.pasta != nil && sn.pasta.Process != nil {
		_ = sn.pasta.Process.Kill()
		if sn.exited != nil {
			<-sn.exited
			sn.metrics.addCPU(CPUNetwork, sn.pasta.ProcessState)
		}
	}
	_ = os.RemoveAll(sn.dir)
}

// release lets bwrap go on to the handler: one byte on its --block-fd. It
// fails when bwrap has ended meanwhile (its reason is in the attempt's log).
func release(block *os.File) error {
	defer block.Close()
	if _, err := block.Write([]byte{1}); err != nil {
		return fmt.Errorf("start the sandbox: %w", err)
	}
	return nil
}
