package bundle

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTriggerFlow: singleton, debounce and batch on a trigger are read, kept in
// the definition (the catalog reads them there) and round-trip.
func TestTriggerFlow(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
triggers:
  - {event: a, singleton: {key: "event.data.id", mode: queue}}
  - {event: b, debounce: {key: "event.data.id", period: 2s, max_wait: 1m}}
  - {event: c, batch: {max: 10, timeout: 5s}}
steps:
  - {key: s, builtin: noop}
`))
	require.NoError(t, err)
	require.NoError(t, m.Validate(nil))
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, &Singleton{Key: "event.data.id", Mode: SingletonQueue}, def.Triggers[0].Singleton)
	require.Equal(t, 2*time.Second, def.Triggers[1].Debounce.Period.Std())
	require.Equal(t, time.Minute, def.Triggers[1].Debounce.MaxWait.Std())
	require.Equal(t, &Batch{Max: 10, Timeout: Duration(5 * time.Second)}, def.Triggers[2].Batch)
	b, err := def.CanonicalJSON()
	require.NoError(t, err)
	require.Contains(t, string(b), `"debounce":{"key":"event.data.id","period":"2s","max_wait":"1m0s"}`)
	back, err := ParseDefinition(b)
	require.NoError(t, err)
	require.Equal(t, def, back)
}

// TestTriggerFlowInvalid: each mistake is refused at deploy, naming the trigger
// and the field.
func TestTriggerFlowInvalid(t *testing.T) {
	t.Parallel()
	manifest := func(trigger string) string {
		return "name: demo\ntriggers:\n  - " + trigger + "\nsteps:\n  - {key: s, builtin: noop}\n"
	}
	tests := []struct {
		name, trigger string
		want          []string
	}{
		{"singleton bad key", `{event: a, singleton: {key: "event.(", mode: skip}}`,
			[]string{`triggers[0].singleton.key: bad expression`}},
		{"singleton unknown name", `{event: a, singleton: {key: "run.id"}}`,
			[]string{`triggers[0].singleton.key: bad expression`}},
		{"singleton bad mode", `{event: a, singleton: {mode: replace}}`,
			[]string{`triggers[0].singleton.mode: mode must be skip, cancel_other or queue, not "replace"`}},
		{"debounce bad key", `{event: a, debounce: {key: "nope.x", period: 1s}}`,
			[]string{`triggers[0].debounce.key: bad expression`}},
		{"debounce no period", `{event: a, debounce: {key: "event.id"}}`,
			[]string{`triggers[0].debounce.period: 0s: must be > 0 and at most 720h0m0s (30 days)`}},
		{"debounce max_wait below period", `{event: a, debounce: {period: 10s, max_wait: 5s}}`,
			[]string{`triggers[0].debounce.max_wait: max_wait 5s is shorter than period 10s`}},
		{"debounce period too long", `{event: a, debounce: {period: 31d}}`,
			[]string{`triggers[0].debounce.period: 744h0m0s: must be > 0 and at most 720h0m0s (30 days)`}},
		{"batch max zero", `{event: a, batch: {max: 0, timeout: 1s}}`,
			[]string{`triggers[0].batch.max: max 0: must be 1 to 1000 events`}},
		{"batch max too big", `{event: a, batch: {max: 1001, timeout: 1s}}`,
			[]string{`triggers[0].batch.max: max 1001: must be 1 to 1000 events`}},
		{"batch no timeout", `{event: a, batch: {max: 5}}`,
			[]string{`triggers[0].batch.timeout: 0s: must be > 0`}},
		{"batch bad key", `{event: a, batch: {max: 5, timeout: 1s, key: "event.data.("}}`,
			[]string{`triggers[0].batch.key: bad expression`}},
		{"batch with input", `{event: a, input: "event.data", batch: {max: 5, timeout: 1s}}`,
			[]string{`triggers[0].input: a batch trigger's run gets {"events": [...]}`}},
		{"two kinds", `{event: a, singleton: {}, batch: {max: 5, timeout: 1s}}`,
			[]string{`triggers[0]: a trigger has at most one of singleton, debounce and batch`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := validateError(t, manifest(tt.trigger))
			for _, w := range tt.want {
				require.True(t, strings.Contains(err.Error(), w), "want %q in:\n%s", w, err)
			}
		})
	}
	// A duration that is not one is refused when parsed, naming its line.
	_, err := ParseManifest([]byte(manifest(`{event: a, debounce: {period: soon}}`)))
	require.ErrorContains(t, err, `invalid duration "soon"`)
}
