package main

import (
	"bytes"
	"context"
	"database/sql"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
)

func TestMigrateStatusAndServeRefusesUnknownMigration(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	getenv := func(k string) string {
		switch k {
		case "CAIRN_DATABASE_URL":
			return url
		case "CAIRN_BLOBSTORE":
			return "file://" + t.TempDir()
		case "CAIRN_LISTEN":
			return "127.0.0.1:0"
		}
		return ""
	}
	cli := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), args, getenv, &stdout, &stderr)
		return stdout.String(), err
	}

	out, err := cli("migrate", "up")
	require.NoError(t, err)
	require.Contains(t, out, "up to date")
	out, err = cli("migrate", "status")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^1\s+00001_catalog\.sql\s+applied\s+\d{4}-`, out)
	out, err = cli("migrate", "plan")
	require.NoError(t, err)
	require.Contains(t, out, "nothing pending")
	_, err = cli("migrate", "up", "--phase", "sideways")
	require.ErrorContains(t, err, "want expand or contract")
	out, err = cli("servers")
	require.NoError(t, err)
	require.Contains(t, out, "0 live")

	// A migration applied by a newer Cairn: serve must refuse to start.
	db, err := sql.Open("postgres", url)
	require.NoError(t, err)
	defer db.Close()
	_, err = db.Exec(`INSERT INTO goose_db_version (version_id, is_applied) VALUES (20991231, true)`)
	require.NoError(t, err)

	out, err = cli("migrate", "status")
	require.NoError(t, err)
	require.Contains(t, out, "unknown to this binary")
	_, err = cli("serve")
	require.Error(t, err)
	require.Contains(t, err.Error(), "ahead of this binary")
	require.Contains(t, err.Error(), "20991231")
	require.Equal(t, 1, exitCode(err))
}
