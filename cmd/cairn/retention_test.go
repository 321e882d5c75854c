package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/maintenance"
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

// TestCLIRunGetArchived: a run archived and deleted by retention is gone from
// run get and read back by run get --archived, as run get showed it.
func TestCLIRunGetArchived(t *testing.T) {
	t.Parallel()
	b := setupCLI(t)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cairn.yaml"), []byte(
		"name: tidy\nretention: {succeeded: 1m, archive: true}\nsteps:\n  - {key: a, builtin: echo}\n  - {key: b, needs: [a], builtin: noop}\n"), 0o644))
	b.mustCLI(t, "deploy", dir)
	out := b.mustCLI(t, "run", "start", "tidy", "--input", `{"x":1}`, "--wait")
	id := strings.TrimSpace(strings.SplitN(out, "\n", 2)[0])

	store, err := openStore(t.Context(), b.dbURL, nil, 0, false)
	require.NoError(t, err)
	defer store.Close()
	_, err = store.DB().ExecContext(t.Context(), `UPDATE runs SET finished_at = now() - interval '2 minutes' WHERE id = $1`, id)
	require.NoError(t, err)
	before := b.mustCLI(t, "run", "get", id, "--output", "json")
	require.Equal(t, 1, maintenance.NewReaper(store, b.blobs, nil).Reap(t.Context()))

	_, err = b.cli(t, "run", "get", id)
	require.Error(t, err)
	var was, now struct {
		Run   json.RawMessage   `json:"run"`
		Steps []json.RawMessage `json:"steps"`
	}
	require.NoError(t, json.Unmarshal([]byte(before), &was))
	require.NoError(t, json.Unmarshal([]byte(b.mustCLI(t, "run", "get", "--archived", id, "--output", "json")), &now))
	require.JSONEq(t, string(was.Run), string(now.Run))
	require.Len(t, now.Steps, 2)
	table := b.mustCLI(t, "run", "get", "--archived", id)
	require.Contains(t, table, "archived ")
	require.Regexp(t, `(?m)^b +succeeded `, table)
}
