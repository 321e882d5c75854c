package bundle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConcurrency: a step's concurrency, or the defaults', with the name defaulting
// to the workflow's; a bad one is refused naming its step and field.
func TestConcurrency(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
defaults:
  concurrency: {key: "input.tenant", limit: 2}
steps:
  - {key: a, builtin: noop}
  - {key: b, builtin: noop, concurrency: {name: stripe, limit: 5}}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, &ConcurrencyDefinition{Name: "demo", Key: "input.tenant", Limit: 2}, def.Steps[0].Concurrency)
	require.Equal(t, &ConcurrencyDefinition{Name: "stripe", Limit: 5}, def.Steps[1].Concurrency)

	for _, tt := range []struct{ yaml, field string }{
		{`{key: a, builtin: noop, concurrency: {limit: 0}}`, "steps[0].concurrency.limit"},
		{`{key: a, builtin: noop, concurrency: {limit: 100001}}`, "steps[0].concurrency.limit"},
		{`{key: a, builtin: noop, concurrency: {name: "Bad Name", limit: 1}}`, "steps[0].concurrency.name"},
		{`{key: a, builtin: noop, concurrency: {key: "deps.x", limit: 1}}`, "steps[0].concurrency.key"},
		{`{key: a, builtin: noop, concurrency: {key: "input.", limit: 1}}`, "steps[0].concurrency.key"},
	} {
		m, err := ParseManifest([]byte("name: demo\nsteps:\n  - " + tt.yaml + "\n"))
		require.NoError(t, err, tt.yaml)
		_, err = m.Normalize()
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, tt.yaml)
		require.Equal(t, tt.field, ve.Field, tt.yaml)
		require.Equal(t, "a", ve.Step, tt.yaml)
	}
}

// TestRateLimit: a step's rate limit, or the defaults'; bad ones are refused.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
defaults:
  rate_limit: {name: stripe, limit: 100, per: 1m}
steps:
  - {key: a, builtin: noop}
  - {key: b, builtin: noop, rate_limit: {key: "input.account", limit: 10, per: 1s}}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, &RateLimitDefinition{Name: "stripe", Limit: 100, Per: Duration(time.Minute), PerMS: 60_000}, def.Steps[0].RateLimit)
	require.Equal(t, &RateLimitDefinition{Name: "demo", Key: "input.account", Limit: 10, Per: Duration(time.Second), PerMS: 1000}, def.Steps[1].RateLimit)
	for _, tt := range []struct{ yaml, field string }{
		{`{key: a, builtin: noop, rate_limit: {limit: 0, per: 1s}}`, "steps[0].rate_limit.limit"},
		{`{key: a, builtin: noop, rate_limit: {limit: 1}}`, "steps[0].rate_limit.per"},
		{`{key: a, builtin: noop, rate_limit: {limit: 1, per: 25h}}`, "steps[0].rate_limit.per"},
		{`{key: a, builtin: noop, rate_limit: {limit: 1, per: 1s, key: "deps.a"}}`, "steps[0].rate_limit.key"},
	} {
		m, err := ParseManifest([]byte("name: demo\nsteps:\n  - " + tt.yaml + "\n"))
		require.NoError(t, err, tt.yaml)
		_, err = m.Normalize()
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, tt.yaml)
		require.Equal(t, tt.field, ve.Field, tt.yaml)
	}
}

// TestPriority: a step's priority, else the defaults'; out of 0..9 is refused.
func TestPriority(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\ndefaults: {priority: 7}\nsteps:\n  - {key: a, builtin: noop}\n  - {key: b, builtin: noop, priority: 0}\n"))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, 7, *def.Steps[0].Priority)
	require.Equal(t, 0, *def.Steps[1].Priority)
	m, err = ParseManifest([]byte("name: demo\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	def, err = m.Normalize()
	require.NoError(t, err)
	require.Nil(t, def.Steps[0].Priority, "unset: no field, the definition's fingerprint is unchanged")
	m, err = ParseManifest([]byte("name: demo\nsteps:\n  - {key: a, builtin: noop, priority: 10}\n"))
	require.NoError(t, err)
	_, err = m.Normalize()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "steps[0].priority", ve.Field)
}

// TestRunsOn: runs_on is sorted and duplicate-free; an empty list or a bad tag is
// refused.
func TestRunsOn(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\nsteps:\n  - {key: a, builtin: noop, runs_on: [gpu, billing, gpu]}\n"))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, []string{"billing", "gpu"}, def.Steps[0].RunsOn)
	for _, tt := range []struct{ yaml, field string }{
		{`{key: a, builtin: noop, runs_on: []}`, "steps[0].runs_on"},
		{`{key: a, builtin: noop, runs_on: [GPU]}`, "steps[0].runs_on[0]"},
	} {
		m, err := ParseManifest([]byte("name: demo\nsteps:\n  - " + tt.yaml + "\n"))
		require.NoError(t, err, tt.yaml)
		_, err = m.Normalize()
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, tt.yaml)
		require.Equal(t, tt.field, ve.Field, tt.yaml)
	}
}

// TestQueueTimeout: a step's queue_timeout, else the defaults'; bounds.
func TestQueueTimeout(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\ndefaults: {queue_timeout: 10m}\nsteps:\n  - {key: a, builtin: noop}\n  - {key: b, builtin: noop, queue_timeout: 30s}\n"))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.Equal(t, Duration(10*time.Minute), *def.Steps[0].QueueTimeout)
	require.EqualValues(t, 30_000, def.Steps[1].QueueTimeoutMS)
	m, err = ParseManifest([]byte("name: demo\nsteps:\n  - {key: a, builtin: noop, queue_timeout: 0s}\n"))
	require.NoError(t, err)
	_, err = m.Normalize()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "steps[0].queue_timeout", ve.Field)
}

// TestRunTimeout: the manifest's timeout bounds a run; out of bounds is refused.
func TestRunTimeout(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\ntimeout: 2h\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.EqualValues(t, 7_200_000, def.TimeoutMS)
	m, err = ParseManifest([]byte("name: demo\ntimeout: 0s\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	_, err = m.Normalize()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "timeout", ve.Field)
}

// TestHandlerFlow: a compensation and an on_failure step take their own flow
// settings, else the defaults'; bad ones are refused naming their field.
func TestHandlerFlow(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(`name: demo
defaults:
  concurrency: {key: "input.tenant", limit: 2}
  priority: 3
on_failure:
  - {key: notify, builtin: noop, rate_limit: {name: pager, limit: 1, per: 1m}, runs_on: [ops]}
steps:
  - key: a
    builtin: noop
    compensate: {builtin: noop, concurrency: {name: refunds, limit: 1}, priority: 9, queue_timeout: 10m}
`))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	c := def.Steps[0].Compensate
	require.Equal(t, &ConcurrencyDefinition{Name: "refunds", Limit: 1}, c.Concurrency)
	require.Equal(t, 9, *c.Priority)
	require.Equal(t, int64(600_000), c.QueueTimeoutMS)
	n := def.OnFailure[0]
	require.Equal(t, &ConcurrencyDefinition{Name: "demo", Key: "input.tenant", Limit: 2}, n.Concurrency, "the defaults'")
	require.Equal(t, 3, *n.Priority)
	require.Equal(t, "pager", n.RateLimit.Name)
	require.Equal(t, []string{"ops"}, n.RunsOn)

	for _, tt := range []struct{ yaml, field string }{
		{"steps:\n  - {key: a, builtin: noop, compensate: {builtin: noop, concurrency: {limit: 0}}}", "steps[0].compensate.concurrency.limit"},
		{"steps:\n  - {key: a, builtin: noop, compensate: {builtin: noop, priority: 10}}", "steps[0].compensate.priority"},
		{"on_failure:\n  - {key: a, builtin: noop, runs_on: []}\nsteps:\n  - {key: b, builtin: noop}", "on_failure[0].runs_on"},
	} {
		m, err := ParseManifest([]byte("name: demo\n" + tt.yaml + "\n"))
		require.NoError(t, err, tt.yaml)
		_, err = m.Normalize()
		var ve *ValidationError
		require.ErrorAs(t, err, &ve, tt.yaml)
		require.Equal(t, tt.field, ve.Field, tt.yaml)
	}
}
