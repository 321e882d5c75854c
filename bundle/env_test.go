package bundle

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnv: env on exec steps (the defaults' under the step's own), secret
// references kept by name in env and http headers, and the definition without
// env unchanged.
func TestEnv(t *testing.T) {
	t.Parallel()
	def := normalize(t, `name: envs
defaults:
  env: {REGION: eu, LEVEL: info}
steps:
  - key: a
    exec: ["./bin/a"]
    env: {LEVEL: debug, PORT: 8080, TOKEN: {secret: api-token}}
    compensate: {exec: ["./bin/undo"], env: {X: "1"}}
  - key: b
    http:
      url: https://example.com/hook
      headers: {authorization: {secret: api-token}, x-plain: yes}
  - {key: c, builtin: noop}
`)
	a := def.Steps[0]
	require.Equal(t, map[string]Value{"REGION": {Plain: "eu"}, "LEVEL": {Plain: "debug"}, "PORT": {Plain: "8080"}, "TOKEN": {Secret: "api-token"}}, a.Env)
	require.Equal(t, map[string]Value{"REGION": {Plain: "eu"}, "LEVEL": {Plain: "info"}, "X": {Plain: "1"}}, a.Compensate.Env)
	require.Equal(t, []string{"api-token"}, a.SecretRefs())
	b := def.Steps[1]
	require.Nil(t, b.Env)
	require.Equal(t, Value{Secret: "api-token"}, b.HTTP.Headers["Authorization"])
	require.Equal(t, Value{Plain: "yes"}, b.HTTP.Headers["X-Plain"])
	require.Nil(t, def.Steps[2].Env)

	js, err := def.CanonicalJSON()
	require.NoError(t, err)
	require.Contains(t, string(js), `"TOKEN":{"secret":"api-token"}`)
	require.Contains(t, string(js), `"Authorization":{"secret":"api-token"}`)
	var back Definition
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, a.Env, back.Steps[0].Env)
	require.Equal(t, b.HTTP.Headers, back.Steps[1].HTTP.Headers)

	plain := normalize(t, "name: x\nsteps:\n  - {key: a, exec: [\"./a\"]}\n")
	pj, err := plain.CanonicalJSON()
	require.NoError(t, err)
	require.NotContains(t, string(pj), `"env"`)
}

// TestEnvInvalid: bad env and secret references fail naming the step and field.
func TestEnvInvalid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, field string }{
		{"name: x\nsteps:\n  - {key: a, builtin: noop, env: {A: b}}\n", "steps[0].env"},
		{"name: x\nsteps:\n  - {key: a, http: {url: \"https://x.example\"}, env: {A: b}}\n", "steps[0].env"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], env: {1A: b}}\n", "steps[0].env.1A"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], env: {CAIRN_RUN_ID: b}}\n", "steps[0].env.CAIRN_RUN_ID"},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], env: {A: {secret: Bad Name}}}\n", "steps[0].env.A.secret"},
		{"name: x\ndefaults: {env: {A: {secret: \"-x\"}}}\nsteps:\n  - {key: a, exec: [\"./a\"]}\n", "defaults.env.A.secret"},
		{"name: x\nsteps:\n  - {key: a, http: {url: \"https://x.example\", headers: {Authorization: {secret: \"UP\"}}}}\n", `steps[0].http.headers["Authorization"].secret`},
		{"name: x\nsteps:\n  - {key: a, exec: [\"./a\"], compensate: {builtin: noop, env: {A: b}}}\n", "steps[0].compensate.env"},
	} {
		m, err := ParseManifest([]byte(tc.yaml))
		require.NoError(t, err, tc.yaml)
		_, err = m.Normalize()
		require.ErrorIs(t, err, ErrInvalid, tc.yaml)
		require.Contains(t, errorFields(err), tc.field, tc.yaml)
	}
	_, err := ParseManifest([]byte("name: x\nsteps:\n  - {key: a, exec: [\"./a\"], env: {A: {secret: s, other: 1}}}\n"))
	require.Error(t, err)
	_, err = ParseManifest([]byte("name: x\nsteps:\n  - {key: a, exec: [\"./a\"], env: {A: [1]}}\n"))
	require.Error(t, err)
}
