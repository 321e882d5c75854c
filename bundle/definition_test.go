package bundle

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func normalize(t *testing.T, yaml string) *Definition {
	t.Helper()
	m, err := ParseManifest([]byte(yaml))
	require.NoError(t, err)
	def, err := m.Normalize()
	require.NoError(t, err)
	return def
}

func fingerprint(t *testing.T, def *Definition) string {
	t.Helper()
	fp, err := def.Fingerprint()
	require.NoError(t, err)
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, fp)
	return fp
}

func TestNormalizeDesignExample(t *testing.T) {
	t.Parallel()
	def := normalize(t, designManifest)
	got, err := def.CanonicalJSON()
	require.NoError(t, err)
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, got, "", "  "))
	// Golden: the catalog stores this; the engine reads it.
	require.JSONEq(t, `{
  "schema": 1,
  "name": "doc-pipeline",
  "description": "Fetch, summarise and store a document",
  "steps": [
    {"key": "fetch", "needs": [], "kind": "exec",
     "exec": {"path": "bin/fetch", "args": ["--fast"]}, "with": {},
     "timeout": "2m0s", "timeout_ms": 120000,
     "retry": {"max_attempts": 3, "backoff": "exponential", "delay": "1s", "delay_ms": 1000, "max_delay": "1m0s", "max_delay_ms": 60000, "jitter": 0, "on_exhausted": "fail"}},
    {"key": "pause", "needs": ["fetch"], "kind": "builtin", "builtin": "sleep", "with": {"duration": "2s"},
     "timeout": "5m0s", "timeout_ms": 300000,
     "retry": {"max_attempts": 3, "backoff": "exponential", "delay": "1s", "delay_ms": 1000, "max_delay": "1m0s", "max_delay_ms": 60000, "jitter": 0, "on_exhausted": "fail"}},
    {"key": "summarize", "needs": ["fetch"], "kind": "http", "http": {"url": "http://127.0.0.1:9000/summarize"}, "with": {},
     "timeout": "5m0s", "timeout_ms": 300000,
     "retry": {"max_attempts": 5, "backoff": "linear", "delay": "2s", "delay_ms": 2000, "max_delay": "1m0s", "max_delay_ms": 60000, "jitter": 0, "on_exhausted": "fail"}},
    {"key": "store", "needs": ["summarize"], "kind": "lambda", "lambda": {"function": "store-summary"}, "with": {},
     "timeout": "5m0s", "timeout_ms": 300000,
     "retry": {"max_attempts": 3, "backoff": "exponential", "delay": "1s", "delay_ms": 1000, "max_delay": "1m0s", "max_delay_ms": 60000, "jitter": 0, "on_exhausted": "fail"}}
  ]
}`, pretty.String())
}

func TestNormalizeDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		yaml    string
		timeout string
		retry   RetryDefinition
	}{
		{
			name:    "built-in defaults",
			yaml:    "name: d\nsteps:\n  - {key: a, builtin: noop}\n",
			timeout: "5m0s",
			retry:   RetryDefinition{MaxAttempts: 1, Backoff: BackoffFixed, Delay: Duration(1e9), DelayMS: 1000, MaxDelay: Duration(3600e9), MaxDelayMS: 3600000, OnExhausted: OnExhaustedFail},
		},
		{
			name:    "defaults section",
			yaml:    "name: d\ndefaults: {timeout: 30s, retry: {max_attempts: 4, jitter: 0.25}}\nsteps:\n  - {key: a, builtin: noop}\n",
			timeout: "30s",
			retry:   RetryDefinition{MaxAttempts: 4, Backoff: BackoffFixed, Delay: Duration(1e9), DelayMS: 1000, MaxDelay: Duration(3600e9), MaxDelayMS: 3600000, Jitter: 0.25, OnExhausted: OnExhaustedFail},
		},
		{
			name:    "step over defaults, field by field",
			yaml:    "name: d\ndefaults: {timeout: 30s, retry: {max_attempts: 4, backoff: linear, max_delay: 10m}}\nsteps:\n  - {key: a, builtin: noop, timeout: 1h, retry: {delay: 2m}}\n",
			timeout: "1h0m0s",
			retry:   RetryDefinition{MaxAttempts: 4, Backoff: BackoffLinear, Delay: Duration(120e9), DelayMS: 120000, MaxDelay: Duration(600e9), MaxDelayMS: 600000, OnExhausted: OnExhaustedFail},
		},
		{
			name:    "on_exhausted from the defaults, and over them",
			yaml:    "name: d\ndefaults: {retry: {on_exhausted: pause}}\nsteps:\n  - {key: a, builtin: noop, retry: {max_attempts: 2}}\n",
			timeout: "5m0s",
			retry:   RetryDefinition{MaxAttempts: 2, Backoff: BackoffFixed, Delay: Duration(1e9), DelayMS: 1000, MaxDelay: Duration(3600e9), MaxDelayMS: 3600000, OnExhausted: OnExhaustedPause},
		},
		{
			name:    "long delay is its own max_delay",
			yaml:    "name: d\nsteps:\n  - {key: a, builtin: noop, retry: {delay: 2h}}\n",
			timeout: "5m0s",
			retry:   RetryDefinition{MaxAttempts: 1, Backoff: BackoffFixed, Delay: Duration(7200e9), DelayMS: 7200000, MaxDelay: Duration(7200e9), MaxDelayMS: 7200000, OnExhausted: OnExhaustedFail},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			def := normalize(t, tt.yaml)
			require.Len(t, def.Steps, 1)
			s := def.Steps[0]
			require.Equal(t, tt.timeout, s.Timeout.String())
			require.Equal(t, s.Timeout.Std().Milliseconds(), s.TimeoutMS)
			require.Equal(t, tt.retry, s.Retry)
			require.NotNil(t, s.Needs)
			require.NotNil(t, s.With)
		})
	}
}

func TestNormalizeOrderAndShapes(t *testing.T) {
	t.Parallel()
	def := normalize(t, `name: d
steps:
  - {key: z, needs: [m, b, m], builtin: noop}
  - {key: m, needs: [b], exec: [bin/../bin/run, x]}
  - {key: b, builtin: echo, with: {n: 1, f: 1.5, list: [a, {k: v}], when: 2024-01-02T03:04:05Z, nil: null}}
  - {key: a, http: {url: "https://x/", headers: {x-api-key: k}}}
`)
	var keys []string
	for _, s := range def.Steps {
		keys = append(keys, s.Key)
	}
	require.Equal(t, []string{"a", "b", "m", "z"}, keys, "topological, ties by key")
	z, ok := def.Step("z")
	require.True(t, ok)
	require.Equal(t, []string{"b", "m"}, z.Needs, "sorted and deduplicated")
	m, _ := def.Step("m")
	require.Equal(t, &ExecDefinition{Path: "bin/run", Args: []string{"x"}}, m.Exec)
	a, _ := def.Step("a")
	require.Equal(t, map[string]Value{"X-Api-Key": {Plain: "k"}}, a.HTTP.Headers)
	b, _ := def.Step("b")
	require.Equal(t, map[string]any{
		"n": int64(1), "f": 1.5, "list": []any{"a", map[string]any{"k": "v"}},
		"when": "2024-01-02T03:04:05Z", "nil": nil,
	}, b.With)

	// A chain declared backwards comes out forwards.
	def = normalize(t, "name: d\nsteps:\n  - {key: a, needs: [b], builtin: noop}\n  - {key: b, needs: [c], builtin: noop}\n  - {key: c, builtin: noop}\n")
	require.Equal(t, "c", def.Steps[0].Key)
	require.Equal(t, "b", def.Steps[1].Key)
	require.Equal(t, "a", def.Steps[2].Key)
}

func TestFingerprint(t *testing.T) {
	t.Parallel()
	base := fingerprint(t, normalize(t, designManifest))
	require.Equal(t, base, fingerprint(t, normalize(t, designManifest)), "stable")

	same := []struct{ name, yaml string }{
		{"steps reordered, needs duplicated, flow style, comments gone", `name: doc-pipeline
description: Fetch, summarise and store a document
defaults: {timeout: 300s, retry: {max_attempts: 3, backoff: exponential, delay: 1000ms, max_delay: 60s}}
steps:
  - {key: pause, needs: [fetch, fetch], builtin: sleep, with: {duration: 2s}}
  - {key: store, needs: [summarize], lambda: {function: store-summary}}
  - {key: summarize, needs: [fetch], http: {url: "http://127.0.0.1:9000/summarize"}, retry: {max_attempts: 5, backoff: linear, delay: 2s}}
  - {key: fetch, exec: [bin/fetch, --fast], timeout: 2m}
`},
		{"defaults spelled out in every step", `name: doc-pipeline
description: Fetch, summarise and store a document
steps:
  - {key: fetch, exec: [./bin/fetch, --fast], timeout: 2m, retry: {max_attempts: 3, backoff: exponential, delay: 1s, max_delay: 1m}}
  - {key: summarize, needs: [fetch], http: {url: "http://127.0.0.1:9000/summarize"}, timeout: 5m, retry: {max_attempts: 5, backoff: linear, delay: 2s, max_delay: 1m}}
  - {key: store, needs: [summarize], lambda: {function: store-summary}, timeout: 5m, retry: {max_attempts: 3, backoff: exponential, delay: 1s, max_delay: 1m}}
  - {key: pause, needs: [fetch], builtin: sleep, with: {duration: 2s}, timeout: 5m, retry: {max_attempts: 3, backoff: exponential, delay: 1s, max_delay: 1m}}
`},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, base, fingerprint(t, normalize(t, tt.yaml)))
		})
	}
	different := map[string]func(string) string{
		"timeout":     func(s string) string { return replaceOnce(s, "timeout: 2m", "timeout: 3m") },
		"args":        func(s string) string { return replaceOnce(s, `"--fast"`, `"--slow"`) },
		"with":        func(s string) string { return replaceOnce(s, "duration: 2s", "duration: 3s") },
		"description": func(s string) string { return replaceOnce(s, "Fetch,", "Get,") },
		"edge":        func(s string) string { return replaceOnce(s, "needs: [summarize]", "needs: [fetch]") },
	}
	for name, change := range different {
		t.Run("differs by "+name, func(t *testing.T) {
			t.Parallel()
			require.NotEqual(t, base, fingerprint(t, normalize(t, change(designManifest))))
		})
	}
}

func TestParseDefinitionRoundTrip(t *testing.T) {
	t.Parallel()
	def := normalize(t, `name: d
steps:
  - {key: a, builtin: echo, with: {big: 12345678901234567890, neg: -9007199254740993, f: 0.1, s: "<&>", deep: {x: [1, 2.5]}}}
`)
	want := fingerprint(t, def)
	raw, err := def.CanonicalJSON()
	require.NoError(t, err)

	// As PostgreSQL jsonb would hand it back: re-indented, keys reordered.
	var generic map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&generic))
	reordered, err := json.MarshalIndent(generic, "", "   ")
	require.NoError(t, err)

	back, err := ParseDefinition(reordered)
	require.NoError(t, err)
	require.Equal(t, want, fingerprint(t, back))

	_, err = ParseDefinition([]byte(`{"schema": 2, "name": "x", "steps": []}`))
	require.ErrorContains(t, err, "unsupported schema 2")
}

func replaceOnce(s, old, new string) string {
	i := bytes.Index([]byte(s), []byte(old))
	if i < 0 {
		panic("replaceOnce: " + old + " not found")
	}
	return s[:i] + new + s[i+len(old):]
}
