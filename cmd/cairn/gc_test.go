package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestGCCommand: `cairn gc --dry-run` reports an old unreferenced blob and
// deletes nothing; `cairn gc` deletes it.
func TestGCCommand(t *testing.T) {
	t.Parallel()
	url, root := testenv.DatabaseURL(t), t.TempDir()
	blobs, err := blobstore.NewFile(root, nil)
	require.NoError(t, err)
	obj, err := blobs.Put(t.Context(), blobstore.KindPayloads, strings.NewReader("orphan"), blobstore.PutOptions{})
	require.NoError(t, err)
	path := filepath.Join(root, filepath.FromSlash(obj.Key))
	old := time.Now().Add(-48 * time.Hour)
	require.NoError(t, os.Chtimes(path, old, old))
	getenv := func(k string) string {
		switch k {
		case "CAIRN_DATABASE_URL":
			return url
		case "CAIRN_BLOBSTORE":
			return "file://" + root
		}
		return ""
	}
	cli := func(args ...string) string {
		var stdout, stderr bytes.Buffer
		require.NoError(t, run(context.Background(), args, getenv, &stdout, &stderr), stderr.String())
		return stdout.String()
	}
	out := cli("gc", "--dry-run")
	require.Contains(t, out, "would delete 1 unreferenced objects (6 bytes)")
	require.FileExists(t, path)
	out = cli("gc")
	require.Contains(t, out, "deleted 1 unreferenced objects (6 bytes)")
	require.NoFileExists(t, path)
}
