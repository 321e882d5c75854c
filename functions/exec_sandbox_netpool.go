package functions

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The network namespaces of a root server's sandboxes are pooled. Making one
// per attempt cost more than the rest of the attempt: the kernel's setup and
// teardown of a namespace, pasta's start (its configuration of the namespace)
// and its end (the removal of its tap device), and nsenter and ip for the
// unreachable routes: 60 to 130 ms of wall time per attempt on a loaded
// 2-core machine, against 10 to 20 ms for bwrap and the handler.
//
// So a namespace, once made and connected, serves one attempt at a time, and
// then the next one of the same workflow with the same network (none, or the
// same allowed ports):
// bwrap starts inside it (the fork joins it: setns on the fork thread) instead
// of making its own (--unshare-net). What an attempt gets is unchanged: a
// namespace that no other attempt uses while it runs, with pasta's outbound
// connections, the same unreachable routes, the same forwarded ports, or
// nothing but its loopback with network: none. What a handler can leave in a
// namespace is nothing that outlives its processes: it has no capability in
// the namespace (it cannot change its addresses, routes, firewall or sysctls),
// and its sockets close when the sandbox's PID namespace is torn down. A
// namespace goes back to the pool only when that is certain (bwrap exited by
// itself after the sandbox's init, and every process of the sandbox with it,
// had ended); after a kill it is thrown away. The next attempt can see the
// previous one's closed TCP connections in TIME_WAIT (/proc/net/tcp: their
// addresses and ports, no data) until they expire: docs/security.md says so.
//
// A namespace is made again when the host's addresses changed since it was
// routed (a stale "unreachable" list), and closed after netnsIdleTimeout
// unused or when pasta ended. A server not running as root cannot join a
// namespace from its fork thread (setns needs CAP_SYS_ADMIN in the server's
// own user namespace), and keeps one namespace and pasta per attempt.

const (
	// netnsIdleTimeout is how long an unused namespace stays in the pool.
	netnsIdleTimeout = 30 * time.Second
	// netnsMaxIdle bounds the namespaces kept unused (each with its pasta).
	netnsMaxIdle = 64
)

// netPool keeps connected network namespaces for the sandboxes of one Exec.
// Safe for concurrent use.
type netPool struct {
	network *sandboxNetwork
	metrics *execMetrics

	mu      sync.Mutex
	idle    map[string][]*pooledNetns
	nIdle   int
	janitor bool // a goroutine closes idle namespaces past netnsIdleTimeout
}

// pooledNetns is one network namespace of the pool.
type pooledNetns struct {
	key string
	// ns is the namespace (/proc/thread-self/ns/net of the thread that made it).
	ns *os.File
	// net is pasta serving it; nil for network: none.
	net *sandboxNet
	// routed is the host's addresses routed unreachable in it (unreachableKey).
	routed   string
	lastUsed time.Time
}

func newNetPool(network *sandboxNetwork, m *execMetrics) *netPool {
	return &netPool{network: network, metrics: m, idle: map[string][]*pooledNetns{}}
}

// netnsKey tells apart the namespaces that can serve a step: its workflow's
// (a namespace never passes from one workflow, perhaps another team's, to
// another, so what an attempt can see of the one before, TIME_WAIT entries,
// is its own workflow's), and none or pasta with the step's allowed ports.
func netnsKey(workflow string, noNetwork bool, allow []int) string {
	if noNetwork {
		return workflow + "\x00none"
	}
	ports := slices.Clone(allow)
	slices.Sort(ports)
	var b strings.Builder
	b.WriteString(workflow)
	b.WriteString("\x00pasta:")
	for i, p := range slices.Compact(ports) {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(p))
	}
	return b.String()
}

// unreachableKey is the list of prefixes routeUnreachable routes now.
func unreachableKey() string {
	var b strings.Builder
	for _, p := range unreachablePrefixes() {
		b.WriteString(p.String())
		b.WriteByte(' ')
	}
	return b.String()
}

// get returns a namespace for a step of workflow with the network noNetwork
// and allow say: an idle one, else a new one. The caller gives it back with
// put.
func (p *netPool) get(ctx context.Context, workflow string, noNetwork bool, allow []int) (*pooledNetns, error) {
	key := netnsKey(workflow, noNetwork, allow)
	routed := ""
	if !noNetwork {
		routed = unreachableKey()
	}
	var stale []*pooledNetns
	defer func() {
		for _, n := range stale {
			n.close()
		}
	}()
	p.mu.Lock()
	for list := p.idle[key]; len(list) > 0; list = p.idle[key] {
		n := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.nIdle--
		if n.routed != routed || (n.net != nil && !n.net.alive()) {
			stale = append(stale, n)
			continue
		}
		p.mu.Unlock()
		return n, nil
	}
	p.mu.Unlock()
	return p.make(ctx, key, noNetwork, allow, routed)
}

// make creates a namespace with its loopback up and, unless noNetwork,
// connects it (routes, pasta).
func (p *netPool) make(ctx context.Context, key string, noNetwork bool, allow []int, routed string) (*pooledNetns, error) {
	ns, err := newNetns()
	if err != nil {
		return nil, fmt.Errorf("sandbox network: make a network namespace: %w", err)
	}
	n := &pooledNetns{key: key, ns: ns, routed: routed}
	if noNetwork {
		return n, nil
	}
	if n.net, err = p.network.connectNetns(ctx, ns, nil, allow, p.metrics); err != nil {
		ns.Close()
		return nil, err
	}
	return n, nil
}

// put gives a namespace back after its attempt. reusable says that nothing of
// the attempt is left in it; otherwise, or when the pool is full or pasta
// ended, it is closed.
func (p *netPool) put(n *pooledNetns, reusable bool) {
	if n == nil {
		return
	}
	if !reusable || (n.net != nil && !n.net.alive()) {
		n.close()
		return
	}
	n.lastUsed = time.Now()
	p.mu.Lock()
	if p.nIdle >= netnsMaxIdle {
		p.mu.Unlock()
		n.close()
		return
	}
	p.idle[n.key] = append(p.idle[n.key], n)
	p.nIdle++
	start := !p.janitor
	p.janitor = true
	p.mu.Unlock()
	if start {
		go p.sweep()
	}
}

// sweep closes the namespaces unused for netnsIdleTimeout, until none is idle.
func (p *netPool) sweep() {
	t := time.NewTicker(netnsIdleTimeout / 3)
	defer t.Stop()
	for range t.C {
		var old []*pooledNetns
		p.mu.Lock()
		for key, list := range p.idle {
			keep := list[:0]
			for _, n := range list {
				if time.Since(n.lastUsed) > netnsIdleTimeout {
					old = append(old, n)
				} else {
					keep = append(keep, n)
				}
			}
			p.idle[key] = keep
		}
		p.nIdle -= len(old)
		done := p.nIdle == 0
		if done {
			p.janitor = false
		}
		p.mu.Unlock()
		for _, n := range old {
			n.close()
		}
		if done {
			return
		}
	}
}

// close stops the namespace's pasta and lets go of it (the kernel removes it
// once nothing holds it).
func (n *pooledNetns) close() {
	n.net.close()
	_ = n.ns.Close()
}
