package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSecretCLI: cairn secret set (from a file, then again: a new version) and
// list, with an admin token; the operator's token is refused; the value is never
// printed.
func TestSecretCLI(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	file := filepath.Join(t.TempDir(), "value")
	require.NoError(t, os.WriteFile(file, []byte("hook-secret-0123456789"), 0o600))

	out := b.mustCLI(t, "secret", "set", "github", "--from-file", file, "--token", b.admin)
	require.Equal(t, "secret github: version 1\n", out)
	out = b.mustCLI(t, "secret", "set", "github", "--from-file", file, "--token", b.admin)
	require.Equal(t, "secret github: version 2\n", out)

	out = b.mustCLI(t, "secret", "list", "--token", b.admin)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Equal(t, []string{"NAME", "VERSION", "SET", "SET", "BY"}, strings.Fields(lines[0]))
	fields := strings.Fields(lines[1])
	require.Equal(t, "github", fields[0])
	require.Equal(t, "2", fields[1])
	require.Equal(t, "root", fields[len(fields)-1])
	require.NotContains(t, out, "hook-secret")

	_, err := b.cli(t, "secret", "set", "github", "--from-file", file)
	require.ErrorContains(t, err, "admin")

	// With only cairn dev's credentials file, cairn secret takes its admin token.
	creds := filepath.Join(t.TempDir(), "credentials")
	require.NoError(t, os.WriteFile(creds, []byte(devCredentials{server: b.server, operator: b.operator, admin: b.admin, viewer: b.viewer}.file()), 0o600))
	var stdout bytes.Buffer
	require.NoError(t, run(t.Context(), []string{"secret", "list", "--credentials", creds}, func(string) string { return "" }, &stdout, io.Discard))
	require.Contains(t, stdout.String(), "github")
}

func TestReadSecretValue(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "value")
	require.NoError(t, os.WriteFile(file, []byte("line\n"), 0o600))
	tests := []struct {
		name, stdin, file, want, wantErr string
	}{
		{name: "stdin drops one newline", stdin: "s3cret\n", want: "s3cret"},
		{name: "stdin keeps inner newlines", stdin: "a\nb\n\n", want: "a\nb\n"},
		{name: "file byte for byte", file: file, want: "line\n"},
		{name: "empty", stdin: "\n", wantErr: "empty"},
		{name: "too large", stdin: strings.Repeat("x", maxSecretValue+1), wantErr: "over"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := readSecretValue(strings.NewReader(tt.stdin), tt.file)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}
