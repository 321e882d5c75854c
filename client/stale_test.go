package client_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGeneratedUpToDate runs the go:generate pipeline of generate.go into a temporary
// folder and fails when the committed openapi-3.0.yaml or client.gen.go differ from
// what it makes: the API changed and nobody ran `make client`.
func TestGeneratedUpToDate(t *testing.T) {
	t.Parallel()
	goBin, err := exec.LookPath("go")
	require.NoError(t, err, "the go command is needed to regenerate the client")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()

	spec := filepath.Join(tmp, "openapi-3.0.yaml")
	goCmd(ctx, t, goBin, "run", "./gen", "-o", spec)
	requireSameFile(t, "openapi-3.0.yaml", spec)

	// The configuration names its output file, which beats -o: point a copy at tmp.
	cfg, err := os.ReadFile("oapi-codegen.yaml")
	require.NoError(t, err)
	gen := filepath.Join(tmp, "client.gen.go")
	tmpCfg := strings.Replace(string(cfg), "\noutput: client.gen.go\n", "\noutput: "+gen+"\n", 1)
	require.NotEqual(t, string(cfg), tmpCfg, "oapi-codegen.yaml no longer has the line output: client.gen.go")
	cfgPath := filepath.Join(tmp, "oapi-codegen.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte(tmpCfg), 0o644))
	goCmd(ctx, t, goBin, "tool", "oapi-codegen", "-config", cfgPath, spec)
	requireSameFile(t, "client.gen.go", gen)
}

func goCmd(ctx context.Context, t *testing.T, goBin string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "go %s:\n%s", strings.Join(args, " "), out.String())
}

func requireSameFile(t *testing.T, committed, fresh string) {
	t.Helper()
	want, err := os.ReadFile(fresh)
	require.NoError(t, err)
	got, err := os.ReadFile(committed)
	require.NoError(t, err)
	require.True(t, bytes.Equal(want, got), "client/%s is stale: run `make client` (go generate ./client) and commit the result", committed)
}
