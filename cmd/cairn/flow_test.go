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
	require.Contains(t, out, "# tenant set to 3 by root")
	out = b.mustCLI(t, "limit", "list", "tenant", "-o", "json", "--token", b.viewer)
	require.Contains(t, out, `"concurrency":3`)
	_, err := b.cli(t, "limit", "set", "tenant", "4", "--token", b.operator)
	require.ErrorContains(t, err, "admin")
	_, err = b.cli(t, "limit", "set", "tenant", "zero", "--token", b.admin)
	require.ErrorContains(t, err, "not a positive number")
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
