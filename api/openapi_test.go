package api

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOpenAPIGolden keeps the committed contract equal to what the code serves.
// Regenerate with `make openapi`.
func TestOpenAPIGolden(t *testing.T) {
	t.Parallel()
	want, err := os.ReadFile("openapi.yaml")
	require.NoError(t, err, "api/openapi.yaml is missing: run `make openapi`")
	got, err := SpecYAML()
	require.NoError(t, err)
	require.Equal(t, string(want), string(got), "api/openapi.yaml is stale: run `make openapi` and commit it")
}
