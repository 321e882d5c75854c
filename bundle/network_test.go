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
