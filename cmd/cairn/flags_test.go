package main

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/runtime"
)

// envOf is a getenv over vars ("KEY=value").
func envOf(vars ...string) func(string) string {
	m := map[string]string{}
	for _, kv := range vars {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return func(k string) string { return m[k] }
}

// TestMalformedEnvStopsStart: a variable that does not parse stops serve and dev
// before they start anything (dev creates no data dir, serve opens no database),
// with an error naming the variable and its value.
func TestMalformedEnvStopsStart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, env, want string
	}{
		{name: "duration without unit", env: "CAIRN_LEASE_TTL=30", want: `CAIRN_LEASE_TTL="30" (--lease-ttl): time: missing unit in duration "30"`},
		{name: "integer", env: "CAIRN_CONCURRENCY=abc", want: `CAIRN_CONCURRENCY="abc" (--concurrency)`},
		{name: "boolean", env: "CAIRN_HTTP_ALLOW_LOCAL=maybe", want: `CAIRN_HTTP_ALLOW_LOCAL="maybe" (--http-allow-local)`},
		{name: "int64", env: "CAIRN_INLINE_LIMIT=256KiB", want: `CAIRN_INLINE_LIMIT="256KiB" (--inline-limit)`},
		{name: "limit", env: "CAIRN_MAX_STREAMS=1k", want: `CAIRN_MAX_STREAMS="1k" (--max-streams)`},
		{name: "idle timeout", env: "CAIRN_IDLE_TIMEOUT=forever", want: `CAIRN_IDLE_TIMEOUT="forever" (--idle-timeout)`},
		{name: "isolation", env: "CAIRN_EXEC_ISOLATION=docker", want: `CAIRN_EXEC_ISOLATION="docker" (--exec-isolation): exec isolation "docker": want bwrap or none`},
		{name: "uid", env: "CAIRN_EXEC_UID=nobody", want: `CAIRN_EXEC_UID="nobody" (--exec-uid)`},
		{name: "log level", env: "CAIRN_LOG_LEVEL=verbose", want: `CAIRN_LOG_LEVEL="verbose": want debug, info, warn or error`},
		{name: "parses but cannot work", env: "CAIRN_LEASE_TTL=10ms", want: "--lease-ttl (CAIRN_LEASE_TTL) must be at least 300ms"},
		{name: "secret key not 32 bytes", env: "CAIRN_SECRET_KEY=c2hvcnQ=", want: "CAIRN_SECRET_KEY: secret key: 5 bytes, want 32"},
		{name: "demand pool tag", env: "CAIRN_DEMAND_POOLS=gpu;GPU,cuda", want: `--demand-pools (CAIRN_DEMAND_POOLS): tag "GPU" must be`},
		{name: "secret key alias", env: "CAIRN_SECRETS_KEY=c2hvcnQ=", want: "secret key: 5 bytes, want 32"},
	}
	for _, tt := range tests {
		for _, command := range []string{"serve", "dev"} {
			t.Run(command+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				dataDir := filepath.Join(t.TempDir(), "data")
				args := []string{command}
				if command == "dev" {
					args = append(args, "--data-dir", dataDir)
				}
				// serve would reach for this database after the settings: nothing listens.
				getenv := envOf(tt.env, "CAIRN_DATABASE_URL=postgres://127.0.0.1:1/none", "CAIRN_BLOBSTORE=file://"+t.TempDir())
				var stdout, stderr bytes.Buffer
				err := run(context.Background(), args, getenv, &stdout, &stderr)
				require.Error(t, err)
				require.Contains(t, err.Error(), tt.want)
				require.NoDirExists(t, dataDir, "dev started before checking its settings")
				require.Empty(t, stdout.String())
			})
		}
	}
}

// TestMalformedEnvAllReported: every malformed variable is named at once.
func TestMalformedEnvAllReported(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"serve"}, envOf("CAIRN_LEASE_TTL=30", "CAIRN_CONCURRENCY=abc", "CAIRN_HTTP_ALLOW_LOCAL=maybe"), io.Discard, io.Discard)
	require.Error(t, err)
	for _, v := range []string{"CAIRN_LEASE_TTL", "CAIRN_CONCURRENCY", "CAIRN_HTTP_ALLOW_LOCAL"} {
		require.Contains(t, err.Error(), v)
	}
}

// TestFlagWinsOverEnv: a flag given on the command line is used, and the variable of
// the same setting is not read, malformed or not.
func TestFlagWinsOverEnv(t *testing.T) {
	t.Parallel()
	err := run(context.Background(), []string{"serve", "--lease-ttl", "10s"}, envOf("CAIRN_LEASE_TTL=30"), io.Discard, io.Discard)
	require.EqualError(t, err, "no database: set --database-url or CAIRN_DATABASE_URL")
}

// TestEnvSetsFlags: the variables reach the settings, parsed as their flags are.
func TestEnvSetsFlags(t *testing.T) {
	t.Parallel()
	getenv := envOf("CAIRN_LEASE_TTL=45s", "CAIRN_CONCURRENCY=7", "CAIRN_HTTP_ALLOW_LOCAL=true", "CAIRN_EXEC_ISOLATION=none",
		"CAIRN_INLINE_LIMIT=1024", "CAIRN_MAX_STREAMS=3", "CAIRN_LISTEN=127.0.0.1:9999")
	cmd := newServeCmd(env(getenv), io.Discard, io.Discard)
	require.NoError(t, cmd.ParseFlags([]string{"--concurrency", "9"}))
	require.NoError(t, applyEnv(cmd.Flags(), env(getenv)))
	want := map[string]string{
		"lease-ttl": "45s", "concurrency": "9", "http-allow-local": "true", "exec-isolation": "none",
		"inline-limit": "1024", "max-streams": "3", "listen": "127.0.0.1:9999", "shutdown-grace": "10s",
	}
	for name, v := range want {
		require.Equal(t, v, cmd.Flags().Lookup(name).Value.String(), name)
	}
}

// TestHelpShowsDefaults: --help shows the defaults the server uses (exported by the
// packages that apply them), never a value from the environment.
func TestHelpShowsDefaults(t *testing.T) {
	t.Parallel()
	getenv := envOf("CAIRN_SIGNING_KEY=secret-signing-key-value", "CAIRN_TOKENS=operator:secret-token-0123456789", "CAIRN_LEASE_TTL=5m")
	help := func(command string) string {
		var stdout bytes.Buffer
		require.NoError(t, run(context.Background(), []string{command, "--help"}, getenv, &stdout, io.Discard))
		return stdout.String()
	}
	for _, command := range []string{"serve", "dev"} {
		out := help(command)
		for _, want := range []string{
			"(env CAIRN_CONCURRENCY) (default " + strconv.Itoa(runtime.DefaultConcurrency) + ")",
			"(env CAIRN_LEASE_TTL) (default " + runtime.DefaultLeaseTTL.String() + ")",
			"(env CAIRN_INLINE_LIMIT) (default " + strconv.Itoa(runtime.DefaultInlineLimit) + ")",
			"(env CAIRN_SHUTDOWN_GRACE) (default " + runtime.DefaultShutdownGrace.String() + ")",
			"(env CAIRN_MAX_STREAMS) (default " + strconv.Itoa(api.DefaultMaxStreams) + ")",
			"(env CAIRN_MAX_CONNECTIONS) (default " + strconv.Itoa(api.DefaultMaxConnections) + ")",
			`(env CAIRN_LISTEN) (default "127.0.0.1:8080")`,
		} {
			require.Contains(t, out, want, "%s --help", command)
		}
		// (The word "secret" itself is in the help of --secret-key.)
		require.NotContains(t, out, "secret-signing-key-value", "%s --help shows a value from the environment", command)
		require.NotContains(t, out, "secret-token", "%s --help shows a value from the environment", command)
		require.NotContains(t, out, "5m0s", "%s --help shows a value from the environment", command)
	}
	require.Contains(t, help("serve"), "(env CAIRN_EXEC_ISOLATION) (default bwrap)")
	require.Contains(t, help("dev"), "(env CAIRN_HTTP_ALLOW_LOCAL) (default true)")
	require.NotContains(t, help("serve"), "(env CAIRN_HTTP_ALLOW_LOCAL) (default", "serve: false, shown as no default")
}
