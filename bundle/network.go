package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Network is an exec step's network (manifest: network, on a step or in
// defaults). Unset, a handler on a server that isolates handlers gets a network
// namespace of its own with outbound access and no route to the server's host
// (its loopback, its addresses, the link-local range: docs/security.md).
//
//	network: none                                  # no network at all, not even outbound
//	network: {allow: ["localhost:5432", "127.0.0.1:9000"]}   # outbound, plus these ports of the host
//
// An allow entry names a port of the server's own host: localhost, 127.0.0.1 or
// [::1], then a port; the handler reaches it at the same address and port.
// Anything else is reachable without an allow, or never.
type Network struct {
	// None is network: none.
	None bool
	// Allow lists the host's ports the handler may reach ("localhost:5432").
	Allow []string
	// invalid is what was written when it is neither (another word, another
	// key): Validate refuses it.
	invalid string
}

// NetworkNone is the network of a step without any (network: none; Definition's
// StepDefinition.Network).
const NetworkNone = "none"

// UnmarshalYAML reads none or {allow: [...]}.
func (n *Network) UnmarshalYAML(node *yaml.Node) error {
	switch node.Kind {
	case yaml.ScalarNode:
		*n = Network{None: node.Value == NetworkNone}
		if !n.None {
			n.invalid = node.Value
		}
		return nil
	case yaml.MappingNode:
		*n = Network{}
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			if k.Value != "allow" {
				n.invalid = "a key " + k.Value
				continue
			}
			if err := v.Decode(&n.Allow); err != nil {
				return fmt.Errorf("line %d: network.allow is a list of host:port strings", v.Line)
			}
		}
		return nil
	}
	return fmt.Errorf("line %d: network is none or {allow: [host:port, …]}", node.Line)
}

// MarshalYAML writes none or {allow: [...]}.
func (n Network) MarshalYAML() (any, error) {
	if n.None {
		return NetworkNone, nil
	}
	return map[string][]string{"allow": n.Allow}, nil
}

// MarshalJSON writes "none" or {"allow": [...]}.
func (n Network) MarshalJSON() ([]byte, error) {
	if n.None {
		return json.Marshal(NetworkNone)
	}
	return json.Marshal(map[string][]string{"allow": n.Allow})
}

// UnmarshalJSON reads "none" or {"allow": [...]}.
func (n *Network) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var v struct {
			Allow []string `json:"allow"`
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&v); err != nil {
			return fmt.Errorf("network is \"none\" or {\"allow\": [host:port, …]}: %w", err)
		}
		*n = Network{Allow: v.Allow}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("network is \"none\" or {\"allow\": [host:port, …]}: %w", err)
	}
	*n = Network{None: s == NetworkNone}
	if !n.None {
		n.invalid = s
	}
	return nil
}

// AllowedPorts reads network allow entries (host:port, the host localhost,
// 127.0.0.1 or [::1]) into their ports, sorted and without repeats. Its errors
// say what is wrong with which entry.
func AllowedPorts(allow []string) ([]int, error) {
	var ports []int
	for _, a := range allow {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, fmt.Errorf("%q: want host:port, like localhost:5432", a)
		}
		if !strings.EqualFold(host, "localhost") {
			ip, err := netip.ParseAddr(host)
			if err != nil || !ip.IsLoopback() {
				return nil, fmt.Errorf("%q: an allow names a port of the server's own host (localhost, 127.0.0.1 or [::1]); other addresses are reachable without one, except the host's own addresses and 169.254.0.0/16, which never are", a)
			}
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%q: the port must be 1 to 65535", a)
		}
		ports = append(ports, p)
	}
	slices.Sort(ports)
	return slices.Compact(ports), nil
}

// network checks a step's network (f is its field path; exec says it runs a
// program).
func (v *validator) network(key, f string, n *Network, exec bool) {
	if n == nil {
		return
	}
	f += ".network"
	switch {
	case n.invalid != "":
		v.add(key, f, "network is %q or {allow: [host:port, …]} (unset: outbound only, no route to the server's host); got %s", NetworkNone, n.invalid)
	case !exec:
		v.add(key, f, "network applies to exec steps only")
	case !n.None && len(n.Allow) == 0:
		v.add(key, f+".allow", "allow lists host:port entries, like localhost:5432 (or leave network unset)")
	}
	for i, a := range n.Allow {
		if _, err := AllowedPorts([]string{a}); err != nil {
			v.add(key, fmt.Sprintf("%s.allow[%d]", f, i), "%v", err)
		}
	}
}

// applyNetwork sets the network of d (and its compensation) from the step's own,
// else the manifest's default, for exec steps.
func applyNetwork(d *StepDefinition, s *Step, def *Network) {
	n := s.Network
	if n == nil {
		n = def
	}
	if d.Kind == KindExec && n != nil {
		if n.None {
			d.Network = NetworkNone
		} else {
			d.NetworkAllow = normalizeAllow(n.Allow)
		}
	}
	if d.Compensate != nil && s.Compensate != nil {
		applyNetwork(d.Compensate, s.Compensate, def)
	}
}

// normalizeAllow sorts allow entries and drops repeats; hosts are lower case.
func normalizeAllow(allow []string) []string {
	out := make([]string, 0, len(allow))
	for _, a := range allow {
		host, port, _ := net.SplitHostPort(a) // validated
		out = append(out, net.JoinHostPort(strings.ToLower(host), port))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
