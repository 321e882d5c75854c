package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Netns is a network namespace of one test, joined to the host by a veth pair:
// a stand-in for "another machine" that never leaves this one. HostAddr is the
// host's end (an address of the host), PeerAddr the namespace's end, and
// LinkLocalAddr a second address of the namespace's end in 169.254.0.0/16 (the
// range of cloud instance metadata), routed from the host through the pair.
type Netns struct {
	Name                              string
	HostAddr, PeerAddr, LinkLocalAddr string
}

var netnsSeq atomic.Int32

// NewNetns makes a network namespace with a veth pair on a /30 of 10.213.0.0/16
// (iproute2's ip netns; root only: it skips otherwise, and fails under CI=true),
// removed when the test ends.
func NewNetns(t testing.TB) *Netns {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("a test network namespace needs root")
		}
		t.Skip("a test network namespace needs root")
	}
	n := int(netnsSeq.Add(1)) + os.Getpid()%1000*8
	ns := &Netns{
		Name:     fmt.Sprintf("cairn-test-%d-%d", os.Getpid(), n),
		HostAddr: fmt.Sprintf("10.213.%d.%d", n/64%256, n%64*4+1),
		PeerAddr: fmt.Sprintf("10.213.%d.%d", n/64%256, n%64*4+2),
		// 169.254.1.0 to 169.254.254.255 are the usable link-local addresses.
		LinkLocalAddr: fmt.Sprintf("169.254.%d.%d", n/250%254+1, n%250+1),
	}
	host, peer := fmt.Sprintf("ct%dh", n), fmt.Sprintf("ct%dp", n)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ns.Name)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", host).Run()
		_ = exec.Command("ip", "netns", "del", ns.Name).Run()
	})
	run("link", "add", host, "type", "veth", "peer", "name", peer)
	run("link", "set", peer, "netns", ns.Name)
	run("addr", "add", ns.HostAddr+"/30", "dev", host)
	run("link", "set", host, "up")
	run("-n", ns.Name, "addr", "add", ns.PeerAddr+"/30", "dev", peer)
	run("-n", ns.Name, "link", "set", peer, "up")
	run("-n", ns.Name, "link", "set", "lo", "up")
	run("-n", ns.Name, "addr", "add", ns.LinkLocalAddr+"/32", "dev", peer)
	run("route", "replace", ns.LinkLocalAddr+"/32", "via", ns.PeerAddr)
	t.Cleanup(func() { _ = exec.Command("ip", "route", "del", ns.LinkLocalAddr+"/32").Run() })
	return ns
}

// Listen listens on addr (host:port) inside the namespace; the listener is
// closed when the test ends.
func (ns *Netns) Listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	errc := make(chan error, 1)
	lnc := make(chan net.Listener, 1)
	// A socket belongs to the namespace of the thread that made it: make it on a
	// thread that joins the namespace and is never given back to other goroutines.
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + ns.Name)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			errc <- err
			return
		}
		lnc <- ln
	}()
	select {
	case err := <-errc:
		t.Fatalf("listen on %s in %s: %v", addr, ns.Name, err)
		return nil
	case ln := <-lnc:
		t.Cleanup(func() { ln.Close() })
		return ln
	}
}
