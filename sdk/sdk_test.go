// Package sdk_test runs the unit tests of the Python and TypeScript function
// SDKs (sdk/python, sdk/ts) under `go test`, so that `make test` runs them;
// the Go SDK's are in ../fn. The conformance suite (conformance/, driven by
// internal/e2e/conformance_test.go) runs all three against a real server.
package sdk_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
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
