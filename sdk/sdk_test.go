// Package sdk_test runs the unit tests of the Python and TypeScript function
// SDKs (sdk/python, sdk/ts) under `go test`, so that `make test` runs them;
// the Go SDK's are in ../fn. The conformance suite (conformance/, driven by
// internal/e2e/conformance_test.go) runs all three against a real server.
package sdk_test

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/sdk"
)

// TestPythonSDK runs sdk/python/tests with the system's python3 (the SDK
// needs 3.9 or later, standard library only).
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	needTool(t, "python3")
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-s", "python/tests")
	cmd.Env = append(cmd.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest:\n%s", out)
}

// TestTypeScriptSDK runs sdk/ts/test with node (20 or later, built-ins only).
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	needTool(t, "node")
	cmd := exec.Command("node", "--test", "ts/test/")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node --test:\n%s", out)
}

// needTool skips the test when a runtime is missing (`make tools` installs it),
// or fails it under CI=true.
func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err == nil {
		return
	}
	msg := name + " is not installed: `make tools` (scripts/install-sdk-runtimes.sh) installs it"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// TestExamplesCarryTheSDK: the examples whose bundles carry a copy of an SDK
// (the Makefile's SDK_PY_EXAMPLES and SDK_TS_EXAMPLES) carry the current one:
// `make sdk-vendor` refreshes them.
func TestExamplesCarryTheSDK(t *testing.T) {
	t.Parallel()
	copies := map[string][]string{
		"python/cairn_fn": {"../examples/events/bin/cairn_fn", "../examples/hello/bin/cairn_fn", "../examples/large-output/bin/cairn_fn", "../examples/map/bin/cairn_fn"},
	}
	for src, dsts := range copies {
		want := readDir(t, src, ".py")
		for _, dst := range dsts {
			requireSameFiles(t, want, readDir(t, dst, ".py"), dst)
		}
	}
	want := map[string]string{}
	for _, name := range []string{"package.json", "index.mjs", "index.d.ts"} {
		b, err := os.ReadFile(filepath.Join("ts", name))
		require.NoError(t, err)
		want[name] = string(b)
	}
	requireSameFiles(t, want, readDir(t, "../examples/fanout/node_modules/@cairnrun/fn", ""), "examples/fanout/node_modules/@cairnrun/fn")
}

// requireSameFiles fails, naming the files, when a copy differs from its source.
func requireSameFiles(t *testing.T, want, got map[string]string, where string) {
	t.Helper()
	var differ []string
	for name, content := range want {
		if got[name] != content {
			differ = append(differ, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			differ = append(differ, name)
		}
	}
	sort.Strings(differ)
	require.Empty(t, differ, "%s differs from the SDK in these files: run make sdk-vendor", where)
}

// TestExamplesParseNoJSONWithSed: the examples' handlers read their envelope
// through an SDK, not with sed.
func TestExamplesParseNoJSONWithSed(t *testing.T) {
	t.Parallel()
	require.NoError(t, filepath.WalkDir("../examples", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		require.False(t, regexp.MustCompile(`(^|[|;&\s])sed\s`).Match(b), "%s runs sed", p)
		return nil
	}))
}

// TestEmbeddedSDKs: Python and TypeScript hold the files a bundle needs.
func TestEmbeddedSDKs(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"cairn_fn/__init__.py", "cairn_fn/_call.py", "cairn_fn/_exec.py", "cairn_fn/_http.py"} {
		_, err := fs.Stat(sdk.Python(), name)
		require.NoError(t, err, name)
	}
	for _, name := range []string{"package.json", "index.mjs", "index.d.ts"} {
		_, err := fs.Stat(sdk.TypeScript(), name)
		require.NoError(t, err, name)
	}
}

// readDir returns the files of dir whose names end in ext, name → content.
func readDir(t *testing.T, dir, ext string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ext) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		out[e.Name()] = string(b)
	}
	return out
}
