package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/testrun"
)

// cairnTest runs `cairn test` with args and returns its stdout and error.
func cairnTest(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, append([]string{"test"}, args...), func(string) string { return "" }, &stdout, &stderr)
	if stderr.Len() > 0 {
		t.Logf("cairn test: stderr:\n%s", stderr.String())
	}
	return stdout.String(), err
}

// writeBundle writes files (path: content) into a new folder.
func writeBundle(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		p = filepath.Join(dir, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
	return dir
}

// TestCLITestBrokenMock: cairn test passes the cases that hold and fails,
// with exit status 1 and a message naming the case, the step and the
// expectation, the one whose mock breaks it; --junit writes both.
func TestCLITestBrokenMock(t *testing.T) {
	t.Parallel()
	dir := writeBundle(t, map[string]string{
		"cairn.yaml": `name: orders
steps:
  - {key: charge, http: {url: "https://payments.invalid/charge"}}
  - {key: ship, needs: [charge], builtin: echo, with: {value: {shipped: true}}}
`,
		"tests/ok.yaml": `name: charged and shipped
mocks:
  charge: {output: {id: ch_1}}
expect:
  status: succeeded
  outputs: {charge.id: ch_1, ship.shipped: true}
`,
		"tests/broken.yaml": `name: broken mock
mocks:
  charge: {error: {message: declined, code: card_declined, retryable: false}}
expect:
  status: succeeded
  steps: {charge: succeeded}
`,
	})
	junit := filepath.Join(t.TempDir(), "junit.xml")
	out, err := cairnTest(t, dir, "--junit", junit)
	require.Error(t, err, out)
	require.Equal(t, 1, exitCode(err))
	require.Contains(t, out, "PASS  charged and shipped")
	require.Contains(t, out, "FAIL  broken mock")
	require.Contains(t, out, `case "broken mock": step charge: expected status succeeded, got failed (error code card_declined)`)
	require.Contains(t, out, "FAIL: 1 passed, 1 failed")

	var suites struct {
		Suites []struct {
			Tests    int `xml:"tests,attr"`
			Failures int `xml:"failures,attr"`
			Cases    []struct {
				Name    string `xml:"name,attr"`
				Failure *struct {
					Message string `xml:"message,attr"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	b, err := os.ReadFile(junit)
	require.NoError(t, err)
	require.NoError(t, xml.Unmarshal(b, &suites), string(b))
	require.Len(t, suites.Suites, 1)
	require.Equal(t, 2, suites.Suites[0].Tests)
	require.Equal(t, 1, suites.Suites[0].Failures)
	for _, c := range suites.Suites[0].Cases {
		if c.Name == "broken mock" {
			require.NotNil(t, c.Failure)
			require.Contains(t, c.Failure.Message, "step charge: expected status succeeded")
		}
	}
}

const sagaDir = "../../examples/saga"

// TestCLIExportReplaySaga: a real run of examples/saga (ship fails, the run
// compensates and fails), exported with cairn run export, replays on a version
// whose ship step changed: reserve and charge answer with their recorded
// outputs, only ship (which has no dependents) runs its handler, and the run
// succeeds. A fixture naming a step the bundle lacks is refused, naming it.
func TestCLIExportReplaySaga(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	b.mustCLI(t, "deploy", sagaDir)
	out, err := b.cli(t, "run", "start", "saga", "--input", `{"gift": false}`, "--wait")
	require.Error(t, err, "the saga's run fails: %s", out)
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])
	_, err = uuid.Parse(id)
	require.NoError(t, err, out)

	exported := b.mustCLI(t, "run", "export", id)
	var fx testrun.Fixture
	require.NoError(t, json.Unmarshal([]byte(exported), &fx))
	require.Equal(t, "saga", fx.Workflow)
	require.Equal(t, "failed", fx.Status)
	fixture := filepath.Join(t.TempDir(), "fixture.json")
	require.NoError(t, os.WriteFile(fixture, []byte(exported), 0o644))

	manifest, err := os.ReadFile(filepath.Join(sagaDir, "cairn.yaml"))
	require.NoError(t, err)
	changed := strings.Replace(string(manifest), "    builtin: fail\n    with: {times: 1}\n", "    builtin: echo\n    with: {value: shipped}\n", 1)
	require.NotEqual(t, string(manifest), changed, "the saga's ship step is as this test expects")
	dir := writeBundle(t, map[string]string{"cairn.yaml": changed})

	out, err = cairnTest(t, dir, "--replay", fixture, "-v")
	require.NoError(t, err, out)
	require.Contains(t, out, "PASS  replay of run "+id)
	// The compensations and the on_failure step would answer as recorded, or
	// run (notify: an on_failure step follows any change), if the run failed.
	require.Contains(t, out, "reused: charge, compensate-charge, compensate-reserve, reserve")
	require.Contains(t, out, "changed: ship; their dependents: notify")
	require.Contains(t, out, "ran their handlers: ship\n")
	require.Regexp(t, `(?m)^ +ship +succeeded +1 attempts$`, out)

	// A fixture naming a step the bundle lacks is refused, naming it.
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(exported), &raw))
	steps := raw["steps"].([]any)
	raw["steps"] = append(steps, map[string]any{"key": "audit", "definition": "sha256:00", "status": "succeeded"})
	bad, err := json.Marshal(raw)
	require.NoError(t, err)
	badFixture := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(badFixture, bad, 0o644))
	_, err = cairnTest(t, dir, "--replay", badFixture)
	require.ErrorContains(t, err, "the fixture names steps that version 1 of saga lacks: audit")
}
