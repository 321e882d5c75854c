package bundle

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestApprovalSteps: approval steps parse, validate and normalize with their
// defaults (required 1, roles [operator], on_timeout fail).
func TestApprovalSteps(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
steps:
  - {key: build, builtin: noop}
  - {key: sign-off, needs: [build], approval: {required: 2, roles: [operator, admin], timeout: 24h, on_timeout: continue}}
  - {key: gate, approval: {}}
`))
	require.NoError(t, err)
	require.NoError(t, m.Validate(nil))
	def, err := m.Normalize()
	require.NoError(t, err)
	byKey := map[string]*StepDefinition{}
	for i := range def.Steps {
		byKey[def.Steps[i].Key] = &def.Steps[i]
	}
	require.Equal(t, KindApproval, byKey["sign-off"].Kind)
	require.Equal(t, ApprovalDefinition{Required: 2, Roles: []string{"admin", "operator"},
		Timeout: ptr(Duration(24 * time.Hour)), TimeoutMS: (24 * time.Hour).Milliseconds(), OnTimeout: "continue"},
		*byKey["sign-off"].Approval)
	require.Equal(t, ApprovalDefinition{Required: 1, Roles: []string{"operator"}, OnTimeout: "fail"}, *byKey["gate"].Approval)
	require.True(t, KindApproval.Waits())

	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)
}

// TestApprovalStepsInvalid: a bad approval is refused at deploy, naming its step
// and field.
func TestApprovalStepsInvalid(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n" + s }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"approval and builtin", steps("  - {key: a, builtin: noop, approval: {}}\n"), []string{
			`cairn.yaml: step "a": sets builtin and approval: set exactly one of`}},
		{"required zero", steps("  - {key: a, approval: {required: 0}}\n"), []string{
			`cairn.yaml: step "a": approval.required: required must be 1 to 100, not 0`}},
		{"viewer role", steps("  - {key: a, approval: {roles: [viewer]}}\n"), []string{
			`cairn.yaml: step "a": approval.roles: role "viewer" may not approve: operator or admin`}},
		{"empty roles", steps("  - {key: a, approval: {roles: []}}\n"), []string{
			`cairn.yaml: step "a": approval.roles: roles is empty`}},
		{"bad timeout", steps("  - {key: a, approval: {timeout: 0s, on_timeout: retry}}\n"), []string{
			`cairn.yaml: step "a": approval.timeout: timeout 0s: must be > 0`,
			`cairn.yaml: step "a": approval.on_timeout: on_timeout must be fail or continue, not "retry"`}},
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
