// Package sdk_test runs the unit tests of the Python and TypeScript function
// SDKs (sdk/python, sdk/ts) under `go test`, so that `make test` runs them;
// the Go SDK's are in ../fn. The conformance suite (conformance/, driven by
// internal/e2e/conformance_test.go) runs all three against a real server.
package sdk_test

import (
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPythonSDK runs sdk/python/tests with the system's python3 (the SDK
// needs 3.9 or later, standard library only).
func TestPythonSDK(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("python3", "-m", "unittest", "discover", "-s", "python/tests")
	cmd.Env = append(cmd.Environ(), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "python3 -m unittest:\n%s", out)
}

// TestTypeScriptSDK runs sdk/ts/test with node (20 or later, built-ins only).
func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("node", "--test", "ts/test/")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "node --test:\n%s", out)
}
