package main

import (
	"database/sql"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNamespaceQuotaCLI: cairn namespace set-quota (admin) sets and clears a
// namespace's quotas, get-quota shows them with their use; a bad value, the
// default namespace and an unknown namespace are refused with what is wrong.
func TestNamespaceQuotaCLI(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	db, err := sql.Open("postgres", b.dbURL)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO namespaces (name, created_by, updated_by) VALUES ('acme', 'test', 'test')`)
	require.NoError(t, err)

	out := b.mustCLI(t, "namespace", "set-quota", "acme", "--running-steps", "5", "--runs-per-minute", "600", "--token", b.admin)
	require.Contains(t, out, "running_steps")
	require.Regexp(t, `running_steps\s+5\s+0 running`, out)
	require.Regexp(t, `runs_per_minute\s+600\s+0 in the last minute`, out)
	out = b.mustCLI(t, "namespace", "set-quota", "acme", "--running-steps", "none", "--token", b.admin)
	require.Regexp(t, `running_steps\s+none`, out)
	require.Regexp(t, `runs_per_minute\s+600`, out, "a quota not given keeps its value")
	out = b.mustCLI(t, "namespace", "get-quota", "acme", "-o", "json", "--token", b.admin)
	require.Contains(t, out, `"runs_per_minute":600`)
	require.Contains(t, out, `"running_steps":null`)
	out = b.mustCLI(t, "namespace", "set-quota", "acme", "--runs-per-minute", "0", "--token", b.admin)
	require.Regexp(t, `runs_per_minute\s+none`, out)

	_, err = b.cli(t, "namespace", "set-quota", "acme", "--running-steps", "-2", "--token", b.admin)
	require.ErrorContains(t, err, "not a positive number")
	_, err = b.cli(t, "namespace", "set-quota", "acme", "--token", b.admin)
	require.ErrorContains(t, err, "--running-steps")
	_, err = b.cli(t, "namespace", "set-quota", "default", "--running-steps", "3", "--token", b.admin)
	require.ErrorContains(t, err, "default namespace takes no quota")
	_, err = b.cli(t, "namespace", "get-quota", "nope", "--token", b.admin)
	require.Error(t, err)
	require.True(t, strings.Contains(err.Error(), "nope") || strings.Contains(err.Error(), "404"), "%v", err)
	_, err = b.cli(t, "namespace", "set-quota", "acme", "--running-steps", "3", "--token", b.operator)
	require.ErrorContains(t, err, "admin")
}
