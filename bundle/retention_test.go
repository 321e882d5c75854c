package bundle

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRetention: periods in days, hours or forever reach the definition in
// seconds; an unset retention leaves the definition (and its fingerprint) as it was.
func TestRetention(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\nretention: {succeeded: 7d, failed: 1d12h, canceled: forever, archive: true}\n" +
		"steps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	require.NotNil(t, def.Retention)
	require.EqualValues(t, 7*24*3600, *def.Retention.SucceededS)
	require.EqualValues(t, 36*3600, *def.Retention.FailedS)
	require.EqualValues(t, -1, *def.Retention.CanceledS)
	require.True(t, *def.Retention.Archive)
	b, err := json.Marshal(def.Retention)
	require.NoError(t, err)
	require.JSONEq(t, `{"succeeded":"7d","succeeded_s":604800,"failed":"1d12h0m0s","failed_s":129600,
		"canceled":"forever","canceled_s":-1,"archive":true}`, string(b))
	var back RetentionDefinition
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, *def.Retention, back)

	m, err = ParseManifest([]byte("name: demo\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	def, err = m.Normalize()
	require.NoError(t, err)
	require.Nil(t, def.Retention)
	b, err = json.Marshal(def)
	require.NoError(t, err)
	require.NotContains(t, string(b), "retention")
}

// TestRetentionInvalid: out of bounds periods are refused naming the field;
// malformed ones fail to parse.
func TestRetentionInvalid(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\nretention: {failed: 30s}\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.NoError(t, err)
	_, err = m.Normalize()
	var ve *ValidationError
	require.ErrorAs(t, err, &ve)
	require.Equal(t, "retention.failed", ve.Field)

	_, err = ParseManifest([]byte("name: demo\nretention: {succeeded: 7 days}\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.ErrorContains(t, err, "invalid retention")
	_, err = ParseManifest([]byte("name: demo\nretention: {kept: 7d}\nsteps:\n  - {key: a, builtin: noop}\n"))
	require.Error(t, err)

	p, err := ParseRetentionPeriod("90m")
	require.NoError(t, err)
	require.Equal(t, 90*time.Minute, p.D)
	require.Equal(t, "1h30m0s", p.String())
}
