package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestWorkflowSteps: workflow steps parse, validate and normalize (a version number,
// an alias, or latest); their definition round-trips; ChildWorkflows lists those
// pinned by number.
func TestWorkflowSteps(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
steps:
  - {key: a, builtin: noop}
  - {key: pinned, needs: [a], workflow: {name: billing, version: 3, input: "deps.a"}}
  - {key: quoted, workflow: {name: billing, version: "4"}}
  - {key: stable, workflow: {name: billing, version: stable, input: "{'n': 1}"}}
  - {key: latest, workflow: {name: other}}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	byKey := map[string]*StepDefinition{}
	for i := range def.Steps {
		byKey[def.Steps[i].Key] = &def.Steps[i]
	}
	require.Equal(t, KindWorkflow, byKey["pinned"].Kind)
	require.Equal(t, WorkflowDefinition{Name: "billing", Version: 3, Input: "deps.a"}, *byKey["pinned"].Workflow)
	require.Equal(t, WorkflowDefinition{Name: "billing", Version: 4}, *byKey["quoted"].Workflow)
	require.Equal(t, WorkflowDefinition{Name: "billing", Alias: "stable", Input: "{'n': 1}"}, *byKey["stable"].Workflow)
	require.Equal(t, WorkflowDefinition{Name: "other"}, *byKey["latest"].Workflow)
	require.Equal(t, []ChildWorkflow{
		{Step: "pinned", Field: "steps[1].workflow.version", Name: "billing", Version: 3},
		{Step: "quoted", Field: "steps[2].workflow.version", Name: "billing", Version: 4},
	}, m.ChildWorkflows())

	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)
}

func TestWorkflowStepsInvalid(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n" + s }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"workflow and builtin", steps("  - {key: a, builtin: noop, workflow: {name: b}}\n"), []string{
			`cairn.yaml: step "a": sets builtin and workflow: set exactly one of`}},
		{"bad name", steps("  - {key: a, workflow: {name: 'No Such'}}\n"), []string{
			`cairn.yaml: step "a": workflow.name: workflow name "No Such" must match`}},
		{"bad version", steps("  - {key: a, workflow: {name: b, version: -2}}\n"), []string{
			`cairn.yaml: step "a": workflow.version: version "-2" must be a version number (1 or more) or an alias`}},
		{"bad input", steps("  - {key: a, workflow: {name: b, input: \"deps.(\"}}\n"), []string{
			`cairn.yaml: step "a": workflow.input: bad expression`}},
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
	_, err := ParseManifest([]byte(steps("  - {key: a, workflow: {name: b, version: [1]}}\n")))
	require.Error(t, err)
}
