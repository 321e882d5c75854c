package bundle

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// designManifest is a manifest with a step of each kind of function, defaults,
// retries and needs.
const designManifest = `name: doc-pipeline                  # ^[a-z0-9][a-z0-9-]{0,62}$
description: Fetch, summarise and store a document
defaults:                           # optional; applied to every step
  timeout: 5m
  retry: {max_attempts: 3, backoff: exponential, delay: 1s, max_delay: 1m}
steps:
  - key: fetch                      # ^[a-z0-9][a-z0-9_-]{0,62}$, unique in the bundle
    exec: ["./bin/fetch", "--fast"] # a program inside the bundle, run once per attempt
    timeout: 2m
  - key: summarize
    needs: [fetch]                  # DAG edges; no cycles; every name must exist
    http: {url: "http://127.0.0.1:9000/summarize"}
    retry: {max_attempts: 5, backoff: linear, delay: 2s}
  - key: store
    needs: [summarize]
    lambda: {function: "store-summary"}
  - key: pause
    needs: [fetch]
    builtin: sleep
    with: {duration: 2s}            # static parameters, passed as "params"
`

// fakeFiles implements FileChecker.
type fakeFiles map[string]uint32

func (f fakeFiles) FileMode(p string) (fs.FileMode, bool) {
	m, ok := f[strings.TrimPrefix(p, "./")]
	return fs.FileMode(m), ok
}

func TestParseManifestDesignExample(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte(designManifest))
	require.NoError(t, err)
	require.NoError(t, m.Validate(fakeFiles{"bin/fetch": 0o755}))
	require.Equal(t, "doc-pipeline", m.Name)
	require.Len(t, m.Steps, 4)
	require.Equal(t, []string{"./bin/fetch", "--fast"}, m.Steps[0].Exec)
	require.Equal(t, "2m0s", m.Steps[0].Timeout.String())
	require.Equal(t, 3, *m.Defaults.Retry.MaxAttempts)
	require.Equal(t, BackoffExponential, m.Defaults.Retry.Backoff)
	require.Equal(t, "http://127.0.0.1:9000/summarize", m.Steps[1].HTTP.URL)
	require.Equal(t, "store-summary", m.Steps[2].Lambda.Function)
	require.Equal(t, map[string]any{"duration": "2s"}, m.Steps[3].With)
}

func TestParseManifestErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"empty", "", []string{"cairn.yaml: manifest is empty"}},
		{"comment only", "# nothing\n", []string{"cairn.yaml: manifest is empty"}},
		{"syntax", "name: [unclosed\n", []string{"cairn.yaml: invalid YAML: line 1: did not find expected ',' or ']'"}},
		{"not a mapping", "- a\n- b\n", []string{"cairn.yaml: line 1: cannot use a list as the manifest"}},
		{"unknown top-level field", "name: a\nversion: 2\nsteps: []\n", []string{`cairn.yaml: line 2: unknown field "version" in the manifest`}},
		{"unknown step field", "name: a\nsteps:\n  - key: a\n    builtin: noop\n    retries: 3\n", []string{`cairn.yaml: line 5: unknown field "retries" in a step`}},
		{"unknown retry field", "name: a\nsteps:\n  - key: a\n    builtin: noop\n    retry: {attempts: 3}\n", []string{`cairn.yaml: line 5: unknown field "attempts" in a retry policy`}},
		{"wrong type", "name: a\nsteps:\n  - key: a\n    builtin: noop\n    retry: {max_attempts: many}\n", []string{`cairn.yaml: line 5: cannot use "many" as an integer`}},
		{"needs not a list", "name: a\nsteps:\n  - key: a\n    needs: b\n", []string{`cairn.yaml: line 4: cannot use "b" as a list of strings`}},
		{"duration without unit", "name: a\nsteps:\n  - key: a\n    builtin: noop\n    timeout: 30\n", []string{`cairn.yaml: line 5: invalid duration "30": must be a string with a unit, like "30s" or "5m"`}},
		{"bad duration", "name: a\nsteps:\n  - key: a\n    builtin: noop\n    timeout: 5 minutes\n", []string{`cairn.yaml: line 5: invalid duration "5 minutes": use a number with a unit, like "30s" or "5m"`}},
		{"duplicate mapping key", "name: a\nname: b\nsteps: []\n", []string{`cairn.yaml: line 2: mapping key "name" already defined at line 1`}},
		{"two documents", "name: a\n---\nname: b\n", []string{"cairn.yaml: manifest has more than one YAML document"}},
		{"several errors", "name: a\nsteps:\n  - key: a\n    colour: red\n    timeout: soon\n", []string{
			`cairn.yaml: line 4: unknown field "colour" in a step`,
			`cairn.yaml: line 5: invalid duration "soon": use a number with a unit, like "30s" or "5m"`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(tt.yaml))
			require.Nil(t, m)
			require.ErrorIs(t, err, ErrInvalid)
			require.NotErrorIs(t, err, ErrTooLarge)
			require.Equal(t, tt.want, messages(err))
		})
	}
}

// messages returns the texts of the ValidationErrors in err.
func messages(err error) []string {
	var out []string
	for _, e := range ValidationErrors(err) {
		out = append(out, e.Error())
	}
	return out
}

func TestValidate(t *testing.T) {
	t.Parallel()
	files := fakeFiles{"bin/run": 0o755, "bin/data": 0o644}
	// step wraps step lines into a manifest after a valid first step "a".
	steps := func(s string) string { return "name: demo\nsteps:\n  - key: a\n    builtin: noop\n" + s }
	tests := []struct {
		name string
		yaml string
		want []string
	}{
		{"valid", steps("  - key: b\n    needs: [a, a]\n    exec: [bin/run]\n"), nil},
		{"missing name", "steps:\n  - key: a\n    builtin: noop\n", []string{"cairn.yaml: name: required"}},
		{"bad name", "name: Doc_Pipeline\nsteps:\n  - key: a\n    builtin: noop\n", []string{
			`cairn.yaml: name: "Doc_Pipeline" must be 1 to 63 lower-case letters, digits and hyphens, starting with a letter or digit`}},
		{"name too long", "name: " + strings.Repeat("a", 64) + "\nsteps:\n  - key: a\n    builtin: noop\n", []string{
			`cairn.yaml: name: "` + strings.Repeat("a", 64) + `" must be 1 to 63 lower-case letters, digits and hyphens, starting with a letter or digit`}},
		{"no steps", "name: demo\nsteps: []\n", []string{"cairn.yaml: steps: at least one step is required"}},
		{"missing key", steps("  - builtin: noop\n"), []string{"cairn.yaml: steps[1].key: required"}},
		{"bad key", steps("  - key: -b\n    builtin: noop\n"), []string{
			`cairn.yaml: steps[1].key: "-b" must be 1 to 63 lower-case letters, digits, '_' and '-', starting with a letter or digit`}},
		{"duplicate key", steps("  - key: a\n    builtin: echo\n"), []string{
			`cairn.yaml: steps[1].key: duplicate step key "a" (first used by steps[0])`}},
		{"unknown need", steps("  - key: b\n    needs: [a, zz]\n    builtin: noop\n"), []string{
			`cairn.yaml: step "b": needs: needs unknown step "zz"`}},
		{"needs itself", steps("  - key: b\n    needs: [b]\n    builtin: noop\n"), []string{
			`cairn.yaml: step "b": needs: needs itself`}},
		{"cycle", "name: demo\nsteps:\n" +
			"  - {key: a, needs: [b], builtin: noop}\n" +
			"  - {key: b, needs: [c], builtin: noop}\n" +
			"  - {key: c, needs: [a], builtin: noop}\n" +
			"  - {key: d, needs: [c], builtin: noop}\n", []string{
			`cairn.yaml: step "a": needs: is part of a dependency cycle: a → b → c → a`}},
		{"two cycles", "name: demo\nsteps:\n" +
			"  - {key: x, needs: [y], builtin: noop}\n" +
			"  - {key: y, needs: [x], builtin: noop}\n" +
			"  - {key: p, needs: [q], builtin: noop}\n" +
			"  - {key: q, needs: [r], builtin: noop}\n" +
			"  - {key: r, needs: [q], builtin: noop}\n", []string{
			`cairn.yaml: step "x": needs: is part of a dependency cycle: x → y → x`,
			`cairn.yaml: step "q": needs: is part of a dependency cycle: q → r → q`}},
		{"no function", steps("  - key: b\n"), []string{
			`cairn.yaml: step "b": has no function: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow`}},
		{"two functions", steps("  - key: b\n    builtin: noop\n    http: {url: 'http://x'}\n"), []string{
			`cairn.yaml: step "b": sets http and builtin: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow`}},
		{"unknown builtin", steps("  - key: b\n    builtin: explode\n"), []string{
			`cairn.yaml: step "b": builtin: unknown built-in "explode" (known: noop, echo, sleep, fail)`}},
		{"bad sleep duration", steps("  - key: b\n    builtin: sleep\n    with: {duration: 2}\n"), []string{
			`cairn.yaml: step "b": with.duration: sleep duration 2 must be a duration string between 0s and 24h, like "2s"`}},
		{"bad fail times", steps("  - key: b\n    builtin: fail\n    with: {times: -1}\n"), []string{
			`cairn.yaml: step "b": with.times: fail times -1 must be an integer >= 0`}},
		{"exec empty", steps("  - key: b\n    exec: []\n"), []string{
			`cairn.yaml: step "b": exec: must name a program of the bundle, like ["./bin/fetch"]`}},
		{"exec absolute", steps("  - key: b\n    exec: [/bin/sh, -c, 'rm -rf /']\n"), []string{
			`cairn.yaml: step "b": exec: program "/bin/sh" must be a relative path inside the bundle, like "./bin/fetch"`}},
		{"exec leaving", steps("  - key: b\n    exec: [../bin/run]\n"), []string{
			`cairn.yaml: step "b": exec: program "../bin/run" must be a relative path inside the bundle, like "./bin/fetch"`}},
		{"exec missing", steps("  - key: b\n    exec: [./bin/nope]\n"), []string{
			`cairn.yaml: step "b": exec: program "./bin/nope" is not a file of the bundle`}},
		{"exec not executable", steps("  - key: b\n    exec: [./bin/data]\n"), []string{
			`cairn.yaml: step "b": exec: program "./bin/data" is not executable (mode 0644): set its execute bit`}},
		{"http relative", steps("  - key: b\n    http: {url: /summarize}\n"), []string{
			`cairn.yaml: step "b": http.url: "/summarize" must be an absolute http or https URL`}},
		{"http ftp", steps("  - key: b\n    http: {url: 'ftp://x/y'}\n"), []string{
			`cairn.yaml: step "b": http.url: "ftp://x/y" must be an absolute http or https URL`}},
		{"http missing url", steps("  - key: b\n    http: {headers: {X-A: b}}\n"), []string{
			`cairn.yaml: step "b": http.url: required`}},
		{"http credentials", steps("  - key: b\n    http: {url: 'https://u:secret@x/'}\n"), []string{
			`cairn.yaml: step "b": http.url: "https://u:xxxxx@x/" must not hold credentials; use headers`}},
		{"http reserved header", steps("  - key: b\n    http: {url: 'https://x/', headers: {cairn-signature: x, X-Ok: y}}\n"), []string{
			`cairn.yaml: step "b": http.headers["cairn-signature"]: header "Cairn-Signature" is set by Cairn and cannot be overridden`}},
		{"http bad header", steps("  - key: b\n    http: {url: 'https://x/', headers: {'bad name': x, X-Ok: \"a\\nb\"}}\n"), []string{
			`cairn.yaml: step "b": http.headers["X-Ok"]: header value contains a line break or NUL`,
			`cairn.yaml: step "b": http.headers["bad name"]: invalid header name "bad name"`}},
		{"lambda empty", steps("  - key: b\n    lambda: {function: ''}\n"), []string{
			`cairn.yaml: step "b": lambda.function: required`}},
		{"lambda bad qualifier", steps("  - key: b\n    lambda: {function: f, qualifier: 'v 1'}\n"), []string{
			`cairn.yaml: step "b": lambda.qualifier: "v 1" is not a Lambda version or alias`}},
		{"zero timeout", steps("  - key: b\n    builtin: noop\n    timeout: 0s\n"), []string{
			`cairn.yaml: step "b": timeout: timeout 0s must be positive`}},
		{"long timeout", steps("  - key: b\n    builtin: noop\n    timeout: 25h\n"), []string{
			`cairn.yaml: step "b": timeout: timeout 25h0m0s is over the 24h limit`}},
		{"bad default timeout", "name: demo\ndefaults: {timeout: -1s}\nsteps:\n  - key: a\n    builtin: noop\n", []string{
			`cairn.yaml: defaults.timeout: timeout -1s must be positive`}},
		{"retry out of range", steps("  - key: b\n    builtin: noop\n    retry: {max_attempts: 0, backoff: random, delay: -1s, jitter: 2}\n"), []string{
			`cairn.yaml: step "b": retry.max_attempts: 0 is out of range 1..100`,
			`cairn.yaml: step "b": retry.backoff: unknown backoff "random" (known: fixed, linear, exponential)`,
			`cairn.yaml: step "b": retry.delay: delay -1s must not be negative`,
			`cairn.yaml: step "b": retry.jitter: 2 is out of range 0..1`}},
		{"unknown on_exhausted", steps("  - key: b\n    builtin: noop\n    retry: {on_exhausted: retry}\n"), []string{
			`cairn.yaml: step "b": retry.on_exhausted: unknown on_exhausted "retry" (known: fail, pause)`}},
		{"too many attempts", steps("  - key: b\n    builtin: noop\n    retry: {max_attempts: 101}\n"), []string{
			`cairn.yaml: step "b": retry.max_attempts: 101 is out of range 1..100`}},
		{"max_delay below delay", steps("  - key: b\n    builtin: noop\n    retry: {delay: 1m, max_delay: 10s}\n"), []string{
			`cairn.yaml: step "b": retry.max_delay: max_delay 10s is less than delay 1m0s (after defaults)`}},
		{"max_delay below delay after defaults", "name: demo\ndefaults: {retry: {max_delay: 30s}}\nsteps:\n  - key: a\n    builtin: noop\n    retry: {delay: 1m}\n", []string{
			`cairn.yaml: step "a": retry.max_delay: max_delay 30s is less than delay 1m0s (after defaults)`}},
		{"bad with", steps("  - key: b\n    builtin: echo\n    with: {a: {1: x}}\n"), []string{
			`cairn.yaml: step "b": with.a: key 1 is not a string`}},
		{"every error at once", "name: X\nsteps:\n  - key: a\n  - key: a\n    builtin: nope\n", []string{
			`cairn.yaml: name: "X" must be 1 to 63 lower-case letters, digits and hyphens, starting with a letter or digit`,
			`cairn.yaml: steps[1].key: duplicate step key "a" (first used by steps[0])`,
			`cairn.yaml: steps[0]: has no function: set exactly one of exec, http, lambda, builtin, sleep, signal, wait_for_event, approval, workflow`,
			`cairn.yaml: steps[1].builtin: unknown built-in "nope" (known: noop, echo, sleep, fail)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, err := ParseManifest([]byte(tt.yaml))
			require.NoError(t, err)
			err = m.Validate(files)
			if tt.want == nil {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.Equal(t, tt.want, messages(err))
			for _, ve := range ValidationErrors(err) {
				require.Equal(t, ManifestPath, ve.Path)
				require.NotEmpty(t, ve.Field)
			}
		})
	}
}

func TestValidationErrorFields(t *testing.T) {
	t.Parallel()
	m, err := ParseManifest([]byte("name: demo\nsteps:\n  - key: a\n    builtin: noop\n  - key: b\n    needs: [zz]\n    builtin: noop\n"))
	require.NoError(t, err)
	err = m.Validate(nil)
	var ve *ValidationError
	require.True(t, errors.As(err, &ve))
	require.Equal(t, ValidationError{Path: "cairn.yaml", Step: "b", Field: "steps[1].needs", Message: `needs unknown step "zz"`}, *ve)
}

// TestParseDurationDays: durations take a leading number of days, as cases and
// people write a year; they are written back in hours.
func TestParseDurationDays(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"365d": 365 * 24 * time.Hour, "1d12h": 36 * time.Hour, "30s": 30 * time.Second, "0d": 0, "2d30m": 48*time.Hour + 30*time.Minute,
	} {
		got, err := ParseDuration(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, bad := range []string{"d", "1.5d", "-1d", "1d-2h", "1dx", "1d+3h", "1234567d"} {
		_, err := ParseDuration(bad)
		require.Error(t, err, bad)
	}
	m, err := ParseManifest([]byte("name: y\nsteps:\n  - {key: nap, sleep: 365d}\n"))
	require.NoError(t, err)
	require.Equal(t, "8760h0m0s", m.Steps[0].Sleep.For.String())
}
