package bundle

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConditions: when, after, compensate and on_failure parse, validate and
// normalize; the definition round-trips, and a manifest without them keeps its
// fingerprint (nothing new is written for the defaults).
func TestConditions(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: orders
defaults: {retry: {max_attempts: 3}}
on_failure:
  - {key: notify, builtin: echo, with: {to: ops}}
steps:
  - key: reserve
    builtin: noop
    compensate: {builtin: echo, with: {undo: reserve}, retry: {max_attempts: 5}}
  - {key: check, needs: [reserve], builtin: noop, when: "input.n > 0"}
  - {key: join, needs: [check], builtin: noop, after: none_failed}
  - {key: plain, needs: [join], builtin: noop, after: all_succeeded}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	byKey := map[string]*StepDefinition{}
	for i := range def.Steps {
		byKey[def.Steps[i].Key] = &def.Steps[i]
	}
	require.Equal(t, "input.n > 0", byKey["check"].When)
	require.Equal(t, AfterNoneFailed, byKey["join"].After)
	require.Equal(t, AfterNoneFailed, byKey["join"].Rule())
	require.Empty(t, byKey["plain"].After, "the default is not written")
	require.Equal(t, AfterAllSucceeded, byKey["plain"].Rule())
	c := byKey["reserve"].Compensate
	require.NotNil(t, c)
	require.Equal(t, "compensate-reserve", c.Key)
	require.Equal(t, []string{"reserve"}, c.Needs)
	require.Equal(t, KindBuiltin, c.Kind)
	require.Equal(t, 5, c.Retry.MaxAttempts)
	require.Len(t, def.OnFailure, 1)
	require.Equal(t, "notify", def.OnFailure[0].Key)
	require.Equal(t, 3, def.OnFailure[0].Retry.MaxAttempts, "the defaults apply")

	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)

	plain, err := ParseManifest([]byte("name: p\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	pd, err := plain.Normalize()
	require.NoError(t, err)
	pb, err := pd.CanonicalJSON()
	require.NoError(t, err)
	for _, field := range []string{"when", "after", "compensate", "on_failure"} {
		require.NotContains(t, string(pb), `"`+field+`"`)
	}
}

// TestConditionsInvalid: each mistake is refused at deploy, naming its step and
// field.
func TestConditionsInvalid(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n  - {key: a, builtin: noop}\n" + s }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"bad when", steps("  - {key: b, needs: [a], builtin: noop, when: \"input.(\"}\n"), []string{
			`cairn.yaml: step "b": when: bad expression`}},
		{"when with an unknown name", steps("  - {key: b, builtin: noop, when: \"nope > 1\"}\n"), []string{
			`cairn.yaml: step "b": when: bad expression`}},
		{"unknown after", steps("  - {key: b, needs: [a], builtin: noop, after: sometimes}\n"), []string{
			`cairn.yaml: step "b": after: unknown trigger rule "sometimes" (known: all_succeeded, all_done, none_failed, any_failed)`}},
		{"after without needs", steps("  - {key: b, builtin: noop, after: all_done}\n"), []string{
			`cairn.yaml: step "b": after: needs no step`}},
		{"compensate a sleep", steps("  - {key: b, builtin: noop, compensate: {sleep: 1h}}\n"), []string{
			`cairn.yaml: step "b": compensate.sleep: a compensation runs a function: it cannot be a sleep`}},
		{"compensate nothing", steps("  - {key: b, builtin: noop, compensate: {with: {x: 1}}}\n"), []string{
			`cairn.yaml: step "b": compensate: a compensation has no function`}},
		{"compensate two kinds", steps("  - {key: b, builtin: noop, compensate: {builtin: noop, exec: [./x]}}\n"), []string{
			`cairn.yaml: step "b": compensate: a compensation sets exec and builtin`}},
		{"compensate with needs", steps("  - {key: b, builtin: noop, compensate: {builtin: noop, needs: [a]}}\n"), []string{
			`cairn.yaml: step "b": compensate.needs: a compensation cannot need steps`}},
		{"compensate key taken", steps("  - {key: b, builtin: noop, compensate: {builtin: noop}}\n  - {key: compensate-b, builtin: noop}\n"), []string{
			`cairn.yaml: step "b": compensate: its compensation runs as step "compensate-b", which is the key of another step`}},
		{"compensate key too long", steps("  - {key: " + strings.Repeat("k", 60) + ", builtin: noop, compensate: {builtin: noop}}\n"), []string{
			`over 63 characters`}},
		{"on_failure signal", steps("on_failure:\n  - {key: n, signal: {name: x}}\n"), []string{
			`cairn.yaml: on_failure step "n": signal: an on_failure step runs a function: it cannot wait for a signal`}},
		{"compensate approval", steps("  - {key: b, builtin: noop, compensate: {approval: {required: 1}}}\n"), []string{
			`cairn.yaml: step "b": compensate.approval: a compensation runs a function: it cannot wait for an approval`}},
		{"on_failure without key", steps("on_failure:\n  - {builtin: noop}\n"), []string{
			`cairn.yaml: on_failure[0].key: required`}},
		{"on_failure key of a step", steps("on_failure:\n  - {key: a, builtin: noop}\n"), []string{
			`cairn.yaml: on_failure[0].key: duplicate step key "a" (used by steps[0])`}},
		{"on_failure bad builtin", steps("on_failure:\n  - {key: n, builtin: nope}\n"), []string{
			`cairn.yaml: on_failure step "n": builtin: unknown built-in "nope"`}},
		{"compensate pauses", steps("  - {key: b, builtin: noop, compensate: {builtin: noop, retry: {on_exhausted: pause}}}\n"), []string{
			`cairn.yaml: step "b": compensate.retry.on_exhausted: a compensation runs after the run failed: it cannot pause the run`}},
		{"on_failure with needs", steps("on_failure:\n  - {key: n, builtin: noop, needs: [a]}\n"), []string{
			`cairn.yaml: on_failure step "n": needs: an on_failure step cannot need steps`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := validateError(t, tt.yaml)
			for _, w := range tt.want {
				require.True(t, strings.Contains(err.Error(), w), "want %q in:\n%s", w, err)
			}
			for _, ve := range ValidationErrors(err) {
				require.NotEmpty(t, ve.Field, "every error names its field: %s", ve)
			}
		})
	}
}
