package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// requireBlob checks that the object a $blob reference names exists in store with
// the referenced size and that its bytes hash to the referenced digest: never a
// missing or partial object.
func requireBlob(t *testing.T, store blobstore.Store, ref blobstore.Ref) {
	t.Helper()
	key, err := ref.Key()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, obj, err := store.Get(ctx, key, blobstore.GetOptions{})
	if errors.Is(err, blobstore.ErrNotFound) {
		t.Fatalf("the catalog references %s, which is not in the bucket", ref.Digest)
	}
	require.NoError(t, err)
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	require.NoError(t, err)
	require.Equal(t, ref.Size, obj.Size, "stored size of %s", ref.Digest)
	require.Equal(t, ref.Size, n, "bytes read of %s", ref.Digest)
	require.Equal(t, ref.Digest, "sha256:"+hex.EncodeToString(h.Sum(nil)), "content of %s", key)
}

// memoryDir returns a new folder on /dev/shm when that tmpfs has need bytes free and
// keeps extended attributes (versitygw's posix backend stores metadata in them), or
// else a folder of the test. It is removed when the test ends.
func memoryDir(t *testing.T, need uint64) string {
	t.Helper()
	var fs syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &fs); err != nil || fs.Bavail*uint64(fs.Bsize) < need {
		t.Logf("/dev/shm is missing or too small: S3 objects go to disk")
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "cairn-e2e-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := syscall.Setxattr(dir, "user.cairn-e2e", []byte("1"), 0); err != nil {
		t.Logf("/dev/shm keeps no extended attributes (%v): S3 objects go to disk", err)
		return t.TempDir()
	}
	return dir
}
