package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/cairnrun/cairn/cairntest"
	"github.com/cairnrun/cairn/client"
)

// initCase is the part of a cairn init test case (tests/*.yaml) this test reads:
// the run's input and what the run must give.
type initCase struct {
	Input  any `yaml:"input"`
	Expect struct {
		Status  string         `yaml:"status"`
		Outputs map[string]any `yaml:"outputs"`
	} `yaml:"expect"`
}

// TestInit writes a project of each language with `cairn init`, builds it as its
// next steps say, validates it with `cairn validate`, and runs its test case on a
// real server: the handler greets the case's input as the case expects.
func TestInit(t *testing.T) {
	t.Parallel()

	srv := cairntest.Start(t)
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
			}
			if lang == "ts" {
				dir = filepath.Join(dir, "bundle") // node_modules stays out of the bundle
			}
			require.Contains(t, cliOut(t, "validate", dir), "valid\nworkflow: greeter-"+lang)

			data, err := os.ReadFile(filepath.Join(dir, "tests", "greet.yaml"))
			require.NoError(t, err)
			var tc initCase
			require.NoError(t, yaml.Unmarshal(data, &tc))
			srv.Deploy(t, dir)
			run := srv.Run(t, "greeter-"+lang, tc.Input)
			require.EqualValues(t, tc.Expect.Status, run.Status, "%v", run.Error)
			for step, want := range tc.Expect.Outputs {
				var got any
				srv.OutputJSON(t, run.Id, step, &got)
				wantJSON, err := json.Marshal(want)
				require.NoError(t, err)
				gotJSON, err := json.Marshal(got)
				require.NoError(t, err)
				require.JSONEq(t, string(wantJSON), string(gotJSON), "output of %s", step)
			}

			// Input the handler refuses: the step fails at once, without retries.
			run = srv.Run(t, "greeter-"+lang, map[string]any{"name": ""})
			require.Equal(t, client.RunStatusFailed, run.Status)
			require.Contains(t, string(mustJSON(t, run.Error)), "input.name")
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
