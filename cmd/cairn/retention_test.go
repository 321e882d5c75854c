package main

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// TestRetentionFlag: --retention takes per-status periods (a status left out
// is kept forever) or one period for all; bad values are refused.
func TestRetentionFlag(t *testing.T) {
	t.Parallel()
	day := 24 * time.Hour
	for in, want := range map[string]catalog.RetentionDefaults{
		"":                                    {},
		"14d":                                 {Succeeded: 14 * day, Failed: 14 * day, Canceled: 14 * day},
		"succeeded=7d,failed=30d,canceled=7d": {Succeeded: 7 * day, Failed: 30 * day, Canceled: 7 * day},
		"succeeded=12h, failed=forever":       {Succeeded: 12 * time.Hour},
	} {
		var f retentionFlag
		require.NoError(t, f.Set(in), in)
		require.Equal(t, want, f.d, in)
	}
	for _, bad := range []string{"7 days", "succeeded=30s", "done=7d", "succeeded=7d,failed"} {
		var f retentionFlag
		require.Error(t, f.Set(bad), bad)
	}
}

// TestRetentionEnv: CAIRN_RETENTION, CAIRN_ARCHIVE_RUNS and CAIRN_IDEMPOTENCY_TTL
// reach the settings.
func TestRetentionEnv(t *testing.T) {
	t.Parallel()
	getenv := envOf("CAIRN_RETENTION=succeeded=7d", "CAIRN_ARCHIVE_RUNS=true", "CAIRN_IDEMPOTENCY_TTL=2h")
	cmd := newServeCmd(env(getenv), io.Discard, io.Discard)
	require.NoError(t, cmd.ParseFlags(nil))
	require.NoError(t, applyEnv(cmd.Flags(), env(getenv)))
	require.Equal(t, "succeeded=7d", cmd.Flags().Lookup("retention").Value.String())
	require.Equal(t, "true", cmd.Flags().Lookup("archive-runs").Value.String())
	require.Equal(t, "2h0m0s", cmd.Flags().Lookup("idempotency-ttl").Value.String())
}
