package blobstore_test

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
	"github.com/cairnrun/cairn/blobstore/blobstoretest"
)

func TestFileStore(t *testing.T) {
	t.Parallel()
	blobstoretest.Exercise(t, func(t *testing.T) blobstore.Store {
		s, err := blobstore.NewFile(t.TempDir(), nil)
		require.NoError(t, err)
		return s
	})
}

// TestFileStoreLargeStream is the acceptance test for streaming: 256 MiB of
// unknown length with the heap in use under 64 MiB. It does not call t.Parallel
// because it measures the whole process's heap: Go runs it before the parallel
// tests start.
func TestFileStoreLargeStream(t *testing.T) {
	s, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	blobstoretest.LargeStream(t, s, 256<<20, 64<<20, blobstore.PutOptions{})
}

func TestFileStoreLayout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	root := t.TempDir()
	s, err := blobstore.NewFile(root, nil)
	require.NoError(t, err)

	content := []byte("hello, layout")
	obj, err := s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{ContentType: "text/plain"})
	require.NoError(t, err)

	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(obj.Key)))
	require.NoError(t, err)
	require.Equal(t, content, data, "the object's bytes sit at <root>/<key>")
	meta, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(obj.Key)+".meta"))
	require.NoError(t, err)
	require.JSONEq(t, `{"content_type": "text/plain", "sha256": "`+obj.SHA256+`"}`, string(meta))

	temps, err := os.ReadDir(filepath.Join(root, ".tmp"))
	require.NoError(t, err)
	require.Empty(t, temps, "no temporary file is left behind")

	// A failed Put leaves nothing either.
	_, err = s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{Size: 3})
	require.ErrorIs(t, err, blobstore.ErrSizeMismatch)
	temps, err = os.ReadDir(filepath.Join(root, ".tmp"))
	require.NoError(t, err)
	require.Empty(t, temps)

	// A missing sidecar falls back to defaults.
	require.NoError(t, os.Remove(filepath.Join(root, filepath.FromSlash(obj.Key)+".meta")))
	stat, err := s.Stat(ctx, obj.Key)
	require.NoError(t, err)
	require.Equal(t, blobstore.DefaultContentType, stat.ContentType)
	require.Equal(t, obj.Digest, stat.SHA256)
}

func TestNewFileRemovesStaleTemps(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	_, err := blobstore.NewFile(root, nil)
	require.NoError(t, err)

	stale := filepath.Join(root, ".tmp", "put-stale")
	fresh := filepath.Join(root, ".tmp", "put-fresh")
	require.NoError(t, os.WriteFile(stale, []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(fresh, []byte("x"), 0o600))
	old := time.Now().Add(-2 * time.Hour)
	require.NoError(t, os.Chtimes(stale, old, old))

	_, err = blobstore.NewFile(root, &blobstore.FileConfig{TempMaxAge: time.Hour})
	require.NoError(t, err)
	require.NoFileExists(t, stale)
	require.FileExists(t, fresh)
}

func TestFileStorePing(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	s, err := blobstore.NewFile(root, nil)
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))

	require.NoError(t, os.RemoveAll(root))
	require.Error(t, s.Ping(t.Context()), "the root is gone")

	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorIs(t, s.Ping(canceled), context.Canceled)
}

func TestNewFileErrors(t *testing.T) {
	t.Parallel()
	_, err := blobstore.NewFile("", nil)
	require.Error(t, err)
	_, err = blobstore.NewFile(t.TempDir(), &blobstore.FileConfig{TempMaxAge: -time.Second})
	require.Error(t, err)

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	_, err = blobstore.NewFile(file, nil)
	require.Error(t, err, "the root is a file")
	require.True(t, strings.Contains(err.Error(), file))
}
