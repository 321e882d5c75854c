package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNetworkNone: network: none is kept on exec steps, refused elsewhere and with
// any other value, and absent from definitions that do not set it (so their
// fingerprints do not change).
func TestNetworkNone(t *testing.T) {
	t.Parallel()
	def := normalize(t, "name: offline\nsteps:\n  - {key: a, exec: [\"./bin/a\"], network: none}\n  - {key: b, exec: [\"./bin/b\"]}\n")
	require.Equal(t, NetworkNone, def.Steps[0].Network)
	require.Empty(t, def.Steps[1].Network)
	js, err := def.CanonicalJSON()
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(js), `"network"`))
	require.NotContains(t, string(js), `"network_allow"`)

	for _, tc := range []struct{ yaml, field string }{
		{"name: x\nsteps:\n  - {key: a, builtin: noop, network: none}\n", "steps[0].network"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], network: host}\n", "steps[0].network"},
	} {
		m, err := ParseManifest([]byte(tc.yaml))
		require.NoError(t, err)
		_, err = m.Normalize()
		require.ErrorIs(t, err, ErrInvalid)
		require.Contains(t, errorFields(err), tc.field)
	}
}

// TestNetworkAllow: network: {allow: [...]} names ports of the server's host, on
// a step or in defaults (the step's own wins, compensations included); anything
// but a loopback host:port is refused with the entry's field and what to write.
func TestNetworkAllow(t *testing.T) {
	t.Parallel()
	def := normalize(t, `name: calls
defaults:
  network: {allow: ["localhost:9000"]}
steps:
  - key: a
    exec: ["./bin/a"]
    network: {allow: ["127.0.0.1:5432", "LOCALHOST:80", "[::1]:5432", "127.0.0.1:5432"]}
    compensate: {exec: ["./bin/undo"]}
  - {key: b, exec: ["./bin/b"], network: none}
  - {key: c, builtin: noop}
  - {key: d, exec: ["./bin/d"]}
`)
	byKey := map[string]StepDefinition{}
	for _, s := range def.Steps {
		byKey[s.Key] = s
	}
	require.Equal(t, []string{"127.0.0.1:5432", "[::1]:5432", "localhost:80"}, byKey["a"].NetworkAllow)
	require.Equal(t, []string{"localhost:9000"}, byKey["a"].Compensate.NetworkAllow)
	require.Equal(t, NetworkNone, byKey["b"].Network)
	require.Empty(t, byKey["b"].NetworkAllow)
	require.Empty(t, byKey["c"].NetworkAllow)
	require.Equal(t, []string{"localhost:9000"}, byKey["d"].NetworkAllow)
	ports, err := AllowedPorts(byKey["a"].NetworkAllow)
	require.NoError(t, err)
	require.Equal(t, []int{80, 5432}, ports)

	for _, tc := range []struct{ yaml, field, says string }{
		{`{key: a, exec: ["./a"], network: {allow: ["10.0.0.5:5432"]}}`, "steps[0].network.allow[0]", "port of the server's own host"},
		{`{key: a, exec: ["./a"], network: {allow: ["localhost"]}}`, "steps[0].network.allow[0]", "want host:port"},
		{`{key: a, exec: ["./a"], network: {allow: ["localhost:0"]}}`, "steps[0].network.allow[0]", "1 to 65535"},
		{`{key: a, exec: ["./a"], network: {allow: []}}`, "steps[0].network.allow", "lists host:port"},
		{`{key: a, exec: ["./a"], network: {deny: ["localhost:1"]}}`, "steps[0].network", "key deny"},
		{`{key: a, builtin: noop, network: {allow: ["localhost:1"]}}`, "steps[0].network", "exec steps only"},
	} {
		m, err := ParseManifest([]byte("name: x\nsteps:\n  - " + tc.yaml + "\n"))
		require.NoError(t, err)
		_, err = m.Normalize()
		require.ErrorIs(t, err, ErrInvalid, tc.yaml)
		require.Contains(t, errorFields(err), tc.field, tc.yaml)
		require.Contains(t, err.Error(), `step "a": `, "the message names the step by its key: %s", tc.yaml)
		require.Contains(t, err.Error(), tc.says, tc.yaml)
	}
	m, err := ParseManifest([]byte("name: x\ndefaults:\n  network: {allow: [\"example.com:443\"]}\nsteps:\n  - {key: a, exec: [\"./a\"]}\n"))
	require.NoError(t, err)
	_, err = m.Normalize()
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, errorFields(err), "defaults.network.allow[0]")
}
