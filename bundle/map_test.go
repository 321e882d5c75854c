package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMapSteps: map parses, validates and normalizes (defaults filled in); its
// definition round-trips; instance keys split back.
func TestMapSteps(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
steps:
  - {key: split, builtin: echo}
  - {key: resize, needs: [split], map: {over: "deps.split.items", max_parallel: 50, tolerate_failures: "5%"}, builtin: echo}
  - {key: each, needs: [split], map: {over: "deps['split']", tolerate_failures: 3}, workflow: {name: other}}
  - {key: fixed, map: {over: "[1, 2, 3]"}, builtin: noop}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	byKey := map[string]*StepDefinition{}
	for i := range def.Steps {
		byKey[def.Steps[i].Key] = &def.Steps[i]
	}
	require.Equal(t, MapDefinition{Over: "deps.split.items", MaxParallel: 50, ToleratePercent: 5, TolerateIsPercent: true}, *byKey["resize"].Map)
	require.Equal(t, MapDefinition{Over: "deps['split']", MaxParallel: DefaultMapParallel, TolerateCount: 3}, *byKey["each"].Map)
	require.Equal(t, KindWorkflow, byKey["each"].Kind)
	require.Nil(t, byKey["split"].Map)
	require.True(t, byKey["resize"].Map.Tolerated(5, 100))
	require.False(t, byKey["resize"].Map.Tolerated(6, 100))
	require.True(t, byKey["each"].Map.Tolerated(3, 10))
	require.False(t, byKey["fixed"].Map.Tolerated(1, 10))

	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)

	require.Equal(t, "resize[17]", InstanceKey("resize", 17))
	base, i, ok := SplitInstanceKey("resize[17]")
	require.True(t, ok)
	require.Equal(t, "resize", base)
	require.EqualValues(t, 17, i)
	_, _, ok = SplitInstanceKey("resize")
	require.False(t, ok)
}

func TestMapStepsInvalid(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n  - {key: up, builtin: noop}\n" + s }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"not upstream", steps("  - {key: a, map: {over: \"deps.up\"}, builtin: noop}\n"), []string{
			`cairn.yaml: step "a": map.over: map.over reads deps.up, but step "up" is not upstream of "a": add it to needs`}},
		{"on a sleep", steps("  - {key: a, map: {over: \"[1]\"}, sleep: 1h}\n"), []string{
			`cairn.yaml: step "a": map: map applies to exec, http, lambda, builtin and workflow steps, not sleep`}},
		{"bad expression", steps("  - {key: a, map: {over: \"[1\"}, builtin: noop}\n"), []string{
			`cairn.yaml: step "a": map.over: bad expression`}},
		{"empty over", steps("  - {key: a, map: {max_parallel: 2}, builtin: noop}\n"), []string{
			`cairn.yaml: step "a": map.over: map.over is empty`}},
		{"bad bounds", steps("  - {key: a, map: {over: \"[1]\", max_parallel: 20000, tolerate_failures: \"lots\"}, builtin: noop}\n"), []string{
			`cairn.yaml: step "a": map.max_parallel: max_parallel 20000: must be 1 to 10000`,
			`cairn.yaml: step "a": map.tolerate_failures: tolerate_failures "lots": a count (3) or a percentage`}},
		{"bad percent", steps("  - {key: a, map: {over: \"[1]\", tolerate_failures: \"150%\"}, builtin: noop}\n"), []string{
			`cairn.yaml: step "a": map.tolerate_failures: tolerate_failures "150%"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := validateError(t, tt.yaml)
			for _, w := range tt.want {
				require.True(t, strings.Contains(err.Error(), w), "want %q in:\n%s", w, err)
			}
		})
	}
}
