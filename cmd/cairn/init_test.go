package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInit writes a project of each language with `cairn init`, builds it as its
// next steps say, validates it with `cairn validate`, and runs its test cases
// with `cairn test`, out of the box: the handler, on the language's SDK (sh
// speaks the protocol itself), greets the case's input, and refuses an empty
// name without retries. In the python project, a broken mock fails the run of
// cairn test with messages naming the case, the step and the expectation.
func TestInit(t *testing.T) {
	t.Parallel()

	for _, lang := range []string{"sh", "python", "go", "ts"} {
		t.Run(lang, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "greeter-"+lang)
			out := cliOut(t, "init", dir, "--lang", lang)
			require.Contains(t, out, "wrote "+dir)
			switch lang {
			case "go":
				build(t, dir, "go", "build", "-o", "bin/greet", "./cmd/greet")
			case "ts":
				build(t, dir, "npm", "install", "--no-audit", "--no-fund")
				build(t, dir, "npm", "run", "build")
				dir = filepath.Join(dir, "bundle") // node_modules stays out of the bundle
			}
			require.Contains(t, cliOut(t, "validate", dir), "valid\nworkflow: greeter-"+lang)

			out, err := cairnTest(t, dir)
			require.NoError(t, err, out)
			require.Contains(t, out, "PASS  greets by name")
			require.Contains(t, out, "PASS  refuses an empty name")
			require.Contains(t, out, "ok: 2 passed")
			if lang != "python" {
				return
			}

			// Break it as a user would: uncomment the case's mock, and add a
			// case whose mock fails the step.
			greet := filepath.Join(dir, "tests", "greet.yaml")
			b, err := os.ReadFile(greet)
			require.NoError(t, err)
			broken := strings.NewReplacer("# mocks:", "mocks:", "#   greet:", "  greet:").Replace(string(b))
			require.NotEqual(t, string(b), broken, "tests/greet.yaml shows a mock to uncomment")
			require.NoError(t, os.WriteFile(greet, []byte(broken), 0o644))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "tests", "down.yaml"), []byte(`name: greeter down
input: {name: ada}
mocks:
  greet: {error: {message: "greeter down", code: unavailable, retryable: false}}
expect:
  steps: {greet: succeeded}
`), 0o644))
			out, err = cairnTest(t, dir)
			require.Error(t, err, out)
			require.Equal(t, 1, exitCode(err))
			require.Contains(t, out, "FAIL  greets by name")
			require.Contains(t, out, `case "greets by name": outputs.greet.greeting: expected "Hello, ada!", got "Hi, ada!"`)
			require.Contains(t, out, "FAIL  greeter down")
			require.Contains(t, out, `case "greeter down": step greet: expected status succeeded, got failed (error code unavailable)`)
			require.Contains(t, out, "PASS  refuses an empty name")
			require.Contains(t, out, "FAIL: 1 passed, 2 failed")
		})
	}
}

// TestInitRefuses: init does not write into a folder with files, nor a name a
// workflow cannot have, nor a language it has no template for.
func TestInitRefuses(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644))
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"folder with files", []string{"init", dir}, "exists and is not empty"},
		{"bad name", []string{"init", filepath.Join(t.TempDir(), "Big_Name")}, `"Big_Name" cannot name a workflow`},
		{"unknown language", []string{"init", filepath.Join(t.TempDir(), "x"), "--lang", "cobol"}, `--lang "cobol": want one of go, python, sh, ts`},
	} {
		_, err := runCLI(t, nil, tc.args...)
		require.ErrorContains(t, err, tc.want, tc.name)
	}
	b, err := os.ReadFile(filepath.Join(dir, "keep.txt"))
	require.NoError(t, err)
	require.Equal(t, "mine", string(b))
}

// TestValidate: validate reports every problem of a bundle folder, naming the
// file, the step and the field, and exits non-zero; a valid folder prints what
// a deploy would register.
func TestValidate(t *testing.T) {
	t.Parallel()

	out := cliOut(t, "validate", "../../examples/saga")
	require.Contains(t, out, "valid\nworkflow: saga\n")
	require.Contains(t, out, "digest:   sha256:")

	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(`name: broken
steps:
  - {key: a, exec: ["./bin/missing"]}
  - {key: b, needs: [nowhere], builtin: echo}
  - {key: c, builtin: noop, timeout: 48h}
`), 0o644))
	_, err := runCLI(t, nil, "validate", dir)
	require.Error(t, err)
	require.Equal(t, 1, exitCode(err))
	msg := err.Error()
	require.True(t, strings.HasPrefix(msg, dir+": invalid bundle, 3 problems:\n"), msg)
	require.Contains(t, msg, `cairn.yaml: step "a": exec: program "./bin/missing" is not a file of the bundle`)
	require.Contains(t, msg, `cairn.yaml: step "b": needs: needs unknown step "nowhere"`)
	require.Contains(t, msg, `step "c": timeout`)

	// The server's step limit, as CAIRN_MAX_STEPS sets it.
	_, err = runCLI(t, map[string]string{"CAIRN_MAX_STEPS": "2"}, "validate", "../../examples/saga")
	require.ErrorContains(t, err, "over the limit of 2 steps per workflow")
}

// cliOut runs the cairn command line with args and no environment, and returns
// what it printed; an error fails t.
func cliOut(t *testing.T, args ...string) string {
	t.Helper()
	out, err := runCLI(t, nil, args...)
	require.NoError(t, err, "cairn %s: %s", strings.Join(args, " "), out)
	return out
}

// build runs a build command of a project in dir.
func build(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s: %s", name, strings.Join(args, " "), out)
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
