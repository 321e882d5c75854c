package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLimitCLI: cairn limit set (admin) changes a limit; cairn limit list shows it;
// the operator's token cannot set one.
func TestLimitCLI(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	out := b.mustCLI(t, "limit", "set", "tenant", "3", "--token", b.admin)
	require.Equal(t, "limit tenant: 3 per key\n", out)
	out = b.mustCLI(t, "limit", "list", "--token", b.viewer)
	require.Equal(t, []string{"NAME", "KEY", "RUNNING", "READY", "LIMIT"}, strings.Fields(strings.Split(out, "\n")[0]))
	require.Contains(t, out, "# tenant set to 3 per key by root")
	out = b.mustCLI(t, "limit", "list", "tenant", "-o", "json", "--token", b.viewer)
	require.Contains(t, out, `"concurrency":3`)
	_, err := b.cli(t, "limit", "set", "tenant", "4", "--token", b.operator)
	require.ErrorContains(t, err, "admin")
	_, err = b.cli(t, "limit", "set", "tenant", "zero", "--token", b.admin)
	require.ErrorContains(t, err, "not a positive number")

	// A rate limit, beside the concurrency limit of the same name.
	out = b.mustCLI(t, "limit", "set", "tenant", "--rate", "100", "--per", "1m", "--token", b.admin)
	require.Equal(t, "limit tenant: 3 per key, 100 per 1m0s\n", out)
	_, err = b.cli(t, "limit", "set", "tenant", "--rate", "100", "--token", b.admin)
	require.ErrorContains(t, err, "go together")
	_, err = b.cli(t, "limit", "set", "tenant", "--rate", "100", "--per", "1y", "--token", b.admin)
	require.ErrorContains(t, err, "rate_limit.per")
	out = b.mustCLI(t, "limit", "list", "--token", b.viewer)
	require.Contains(t, out, "# tenant set to 3 per key, 100 per 1m0s by root")
	out = b.mustCLI(t, "limit", "clear", "tenant", "--token", b.admin)
	require.Equal(t, "limit tenant: the manifests' limits apply\n", out)
	out = b.mustCLI(t, "limit", "list", "--token", b.viewer)
	require.NotContains(t, out, "# tenant")
}

func TestParseDeadline(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	at, err := parseDeadline("2h", now)
	require.NoError(t, err)
	require.Equal(t, now.Add(2*time.Hour), at)
	at, err = parseDeadline("2026-02-01T00:00:00Z", now)
	require.NoError(t, err)
	require.Equal(t, time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC), at)
	_, err = parseDeadline("-1h", now)
	require.Error(t, err)
	_, err = parseDeadline("soon", now)
	require.Error(t, err)
}
