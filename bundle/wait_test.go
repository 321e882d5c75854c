package bundle

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitSteps: sleep and signal steps parse, validate and normalize; a bad one is
// refused naming its step and field.
func TestWaitSteps(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
steps:
  - {key: a, builtin: noop}
  - {key: cool-off, needs: [a], sleep: 1h}
  - {key: later, needs: [a], sleep: {until: "input.send_at"}}
  - {key: paid, signal: {name: paid, timeout: 72h, on_timeout: continue}}
  - {key: forever, signal: {name: go}}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	byKey := map[string]*StepDefinition{}
	for i := range def.Steps {
		byKey[def.Steps[i].Key] = &def.Steps[i]
	}
	require.Equal(t, KindSleep, byKey["cool-off"].Kind)
	require.Equal(t, time.Hour, byKey["cool-off"].Sleep.Duration.Std())
	require.EqualValues(t, time.Hour.Milliseconds(), byKey["cool-off"].Sleep.DurationMS)
	require.Equal(t, "input.send_at", byKey["later"].Sleep.Until)
	require.Equal(t, KindSignal, byKey["paid"].Kind)
	require.Equal(t, SignalDefinition{Name: "paid", Timeout: ptr(Duration(72 * time.Hour)), TimeoutMS: (72 * time.Hour).Milliseconds(),
		OnTimeout: "continue"}, *byKey["paid"].Signal)
	require.Equal(t, SignalDefinition{Name: "go", OnTimeout: "fail"}, *byKey["forever"].Signal)
	require.True(t, KindSleep.Waits())
	require.False(t, KindExec.Waits())
	require.ElementsMatch(t, []string{"paid", "go"}, def.SignalNames())

	// The definition round-trips through its JSON (the catalog stores it).
	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)
}

func ptr[T any](v T) *T { return &v }

func TestWaitStepsInvalid(t *testing.T) {
	t.Parallel()
	steps := func(s string) string { return "name: demo\nsteps:\n" + s }
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"sleep and builtin", steps("  - {key: a, builtin: noop, sleep: 1h}\n"), []string{
			`cairn.yaml: step "a": sets builtin and sleep: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow`}},
		{"sleep and signal", steps("  - {key: a, sleep: 1h, signal: {name: x}}\n"), []string{
			`cairn.yaml: step "a": sets sleep and signal: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow`}},
		{"sleep too long", steps("  - {key: a, sleep: 9000h}\n"), []string{
			`cairn.yaml: step "a": sleep: sleep 9000h0m0s: must be > 0 and at most 8784h0m0s (a year)`}},
		{"sleep zero", steps("  - {key: a, sleep: 0s}\n"), []string{
			`cairn.yaml: step "a": sleep: sleep 0s: must be > 0 and at most 8784h0m0s (a year)`}},
		{"sleep bad expression", steps("  - {key: a, sleep: {until: \"input.(\"}}\n"), []string{
			`cairn.yaml: step "a": sleep.until: bad expression`}},
		{"sleep unknown name", steps("  - {key: a, sleep: {until: \"nope.x\"}}\n"), []string{
			`cairn.yaml: step "a": sleep.until: bad expression`}},
		{"sleep empty until", steps("  - {key: a, sleep: {until: \"\"}}\n"), []string{
			`cairn.yaml: step "a": sleep.until: sleep.until is empty`}},
		{"signal bad name", steps("  - {key: a, signal: {name: 'Bad Name'}}\n"), []string{
			`cairn.yaml: step "a": signal.name: signal name "Bad Name" must match`}},
		{"signal bad timeout", steps("  - {key: a, signal: {name: x, timeout: -1s, on_timeout: retry}}\n"), []string{
			`cairn.yaml: step "a": signal.timeout: timeout -1s: must be > 0`,
			`cairn.yaml: step "a": signal.on_timeout: on_timeout must be fail or continue, not "retry"`}},
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
	// A sleep that is neither a duration nor {until} is refused when parsed.
	for _, bad := range []string{"  - {key: a, sleep: [1]}\n", "  - {key: a, sleep: {for: 1h}}\n", "  - {key: a, sleep: 5}\n"} {
		_, err := ParseManifest([]byte(steps(bad)))
		require.Error(t, err, bad)
	}
}
