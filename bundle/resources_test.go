package bundle

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestResources: resources on exec steps are normalized (sizes in bytes),
// refused elsewhere and out of range, naming the step and field.
func TestResources(t *testing.T) {
	t.Parallel()
	def := normalize(t, "name: r\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {memory: 256Mi, cpu: 0.5, pids: 64}}\n  - {key: b, exec: [\"./b\"], resources: {memory: 2000000}}\n  - {key: c, exec: [\"./c\"]}\n")
	require.Equal(t, &ResourcesDefinition{MemoryBytes: 256 << 20, CPU: 0.5, Pids: 64}, def.Steps[0].Resources)
	require.Equal(t, &ResourcesDefinition{MemoryBytes: 2e6}, def.Steps[1].Resources)
	require.Nil(t, def.Steps[2].Resources)

	for _, tc := range []struct{ yaml, field string }{
		{"name: x\nsteps:\n  - {key: a, builtin: noop, resources: {memory: 1Gi}}\n", "steps[0].resources"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {memory: lots}}\n", "steps[0].resources.memory"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {memory: 1Ki}}\n", "steps[0].resources.memory"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {cpu: 0}}\n", "steps[0].resources.cpu"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {pids: 0}}\n", "steps[0].resources.pids"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], resources: {}}\n", "steps[0].resources"},
	} {
		m, err := ParseManifest([]byte(tc.yaml))
		require.NoError(t, err, tc.yaml)
		_, err = m.Normalize()
		require.ErrorIs(t, err, ErrInvalid, tc.yaml)
		require.Contains(t, errorFields(err), tc.field, tc.yaml)
	}
}
