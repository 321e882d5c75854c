package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCLI runs the command line with vars as its environment, returning stdout and
// the error run returns (what main turns into an exit code and a message).
func runCLI(t *testing.T, vars map[string]string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), args, func(k string) string { return vars[k] }, &stdout, &stderr)
	return stdout.String() + stderr.String(), err
}

// TestCLIUnknownCommand: a mistyped command is an error (exit 1) that names it and
// suggests the command meant, at any depth; it used to print the help and exit 0.
func TestCLIUnknownCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"subcommand", []string{"run", "lst"}, []string{`unknown command "lst" for "cairn run"`, `did you mean "list"?`}},
		{"subcommand of an alias", []string{"runs", "statr", "hello"}, []string{`unknown command "statr" for "cairn run"`, `did you mean "start"?`}},
		{"deeper", []string{"schedule", "trigerr", "x"}, []string{`unknown command "trigerr" for "cairn schedule"`, `did you mean "trigger"?`}},
		{"top level", []string{"delpoy", "x"}, []string{`unknown command "delpoy" for "cairn"`, `did you mean "deploy"?`}},
		{"nothing close", []string{"run", "zzzzzz"}, []string{`unknown command "zzzzzz" for "cairn run"`, "cairn run --help"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := runCLI(t, nil, tt.args...)
			require.Error(t, err)
			require.Equal(t, 1, exitCode(err))
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
	// A group without a command still shows its help, successfully.
	out, err := runCLI(t, nil, "run")
	require.NoError(t, err)
	require.Contains(t, out, "Available Commands")
}

// TestCLIServerNotRunning: with no server listening, a command names the URL it
// tried, where that URL came from, and how to start a server; it used to print
// Go's "dial tcp …: connect: connection refused".
func TestCLIServerNotRunning(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	const token = "some-token-0123456789"

	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	require.NoError(t, os.WriteFile(creds, []byte("CAIRN_SERVER="+url+"\nCAIRN_TOKEN="+token+"\n"), 0o600))
	tests := []struct {
		name string
		vars map[string]string
		args []string
		from string
	}{
		{"environment", map[string]string{"CAIRN_SERVER": url, "CAIRN_TOKEN": token}, []string{"run", "list"}, "from CAIRN_SERVER"},
		{"flag", nil, []string{"workflow", "list", "--server", url, "--token", token}, "from --server"},
		{"credentials file", nil, []string{"run", "list", "--credentials", creds}, "from " + creds},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := runCLI(t, tt.vars, tt.args...)
			require.Error(t, err)
			msg := err.Error()
			require.Contains(t, msg, "cannot reach the Cairn server at "+url+" ("+tt.from+")")
			require.Contains(t, msg, "connection refused")
			require.Contains(t, msg, "cairn dev")
		})
	}
}

// TestCLIStaleToken: after `cairn dev` restarted (new tokens), a token kept in the
// shell is refused with an error that says the server does not know it and where
// the current tokens are; it used to be a bare "unauthorized (HTTP 401)".
func TestCLIStaleToken(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	_, err := runCLI(t, map[string]string{"CAIRN_SERVER": b.server, "CAIRN_TOKEN": newToken()}, "run", "list")
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, "the server at "+b.server+" does not know the token of CAIRN_TOKEN")
	require.Contains(t, msg, "new tokens")
	require.Contains(t, msg, ".cairn/credentials")

	_, err = runCLI(t, nil, "run", "list", "--server", b.server, "--token", newToken())
	require.Error(t, err)
	require.Contains(t, err.Error(), "does not know the token of --token")
}

// TestCLIBadInputJSON: --input that is not JSON is refused before anything is
// sent, saying where the mistake is (line, column and byte offset).
func TestCLIBadInputJSON(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"CAIRN_SERVER": "http://127.0.0.1:1", "CAIRN_TOKEN": "some-token-0123456789"}
	_, err := runCLI(t, vars, "run", "start", "hello", "--input", `{"name": "ada",}`)
	require.Error(t, err)
	require.Contains(t, err.Error(), "--input is not valid JSON: line 1, column 16 (byte 15): invalid character '}'")

	file := filepath.Join(t.TempDir(), "in.json")
	require.NoError(t, os.WriteFile(file, []byte("{\n  \"a\": 1,\n  \"b\": tru\n}\n"), 0o600))
	_, err = runCLI(t, vars, "run", "start", "hello", "--input", "@"+file)
	require.Error(t, err)
	require.Contains(t, err.Error(), file+" is not valid JSON: line 3, column 11")

	_, err = runCLI(t, vars, "run", "start", "hello", "--input", `{"a": [1, 2`)
	require.Error(t, err)
	require.Contains(t, err.Error(), "--input is not valid JSON: line 1, column 12 (byte 11): unexpected end of JSON input")
}
