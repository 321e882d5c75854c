package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTokenAndAuditCLI: cairn token create prints the value once (alone on
// stdout), the new token works, list shows it without a value, revoke stops it;
// cairn audit list shows those writes with filters, and audit export writes them
// to the blob store. Both need an admin token.
func TestTokenAndAuditCLI(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)

	_, err := b.cli(t, "token", "create", "ci", "--role", "operator")
	require.ErrorContains(t, err, "admin", "the operator token may not create tokens")
	_, err = b.cli(t, "token", "create", "ci", "--role", "operator", "--expires-in", "soon", "--token", b.admin)
	require.ErrorContains(t, err, "--expires-in")

	value := strings.TrimSpace(b.mustCLI(t, "token", "create", "ci", "--role", "operator", "--expires-in", "30d", "--token", b.admin))
	require.Regexp(t, `^cairn_[A-Za-z0-9_-]{43}$`, value)
	out := b.mustCLI(t, "workflows", "list", "--token", value)
	require.Contains(t, out, "NAME", "the new token works")

	out = b.mustCLI(t, "token", "list", "--token", b.admin)
	require.NotContains(t, out, value)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	fields := strings.Fields(lines[1])
	id := fields[0]
	require.Equal(t, []string{"ci", "operator"}, fields[1:3])
	require.Equal(t, "-", fields[len(fields)-1], "not revoked")

	out = b.mustCLI(t, "token", "revoke", id, "--token", b.admin)
	require.Contains(t, out, "token ci ("+id+") revoked at")
	require.Len(t, strings.Split(strings.TrimSpace(b.mustCLI(t, "token", "list", "--token", b.admin)), "\n"), 1, "revoked: listed with --revoked only")
	require.Contains(t, b.mustCLI(t, "token", "list", "--revoked", "--token", b.admin), id)

	// The audit log: the create and the revoke, by root; filters.
	out = b.mustCLI(t, "audit", "list", "--since", "1h", "--actor", "root", "--token", b.admin)
	require.Contains(t, out, "createToken")
	require.Contains(t, out, "revokeToken")
	require.Contains(t, out, "id="+id)
	out = b.mustCLI(t, "audit", "list", "--action", "revokeToken", "-o", "json", "--token", b.admin)
	var list struct {
		Items []struct {
			Actor, Action, Target, Outcome string
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Items, 1)
	require.Equal(t, "root", list.Items[0].Actor)
	require.Equal(t, "ok", list.Items[0].Outcome)
	out = b.mustCLI(t, "audit", "list", "--actor", "nobody", "--token", b.admin)
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 1, "only the header: %s", out)
	_, err = b.cli(t, "audit", "list")
	require.ErrorContains(t, err, "admin")

	out = b.mustCLI(t, "audit", "export", "--token", b.admin)
	require.Regexp(t, `^audit/sha256/[0-9a-f]{64}\t\d+ records\t\d+ bytes\n`, out)
}
