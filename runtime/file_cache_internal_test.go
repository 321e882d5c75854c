package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
)

// TestFileCacheCap: past its cap the cache evicts the entries used least
// recently, never one an attempt holds, and a restarted cache finds what is
// on disk and applies the cap.
func TestFileCacheCap(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	digests := map[string]string{}
	for _, name := range []string{"a", "b", "c", "d"} {
		obj, err := blobs.Put(ctx, blobstore.KindPayloads, bytes.NewReader(bytes.Repeat([]byte(name), 1000)), blobstore.PutOptions{})
		require.NoError(t, err)
		digests[name] = obj.Digest
	}
	dir := t.TempDir()
	c, err := newFileCache(dir, blobs, 2500)
	require.NoError(t, err)
	path := func(name string) string { return filepath.Join(dir, "blobs", digests[name][7:]) }
	get := func(name string, u *cacheUse) {
		t.Helper()
		p, err := c.blobFile(ctx, blobstore.Ref{Digest: digests[name]}, u)
		require.NoError(t, err)
		require.Equal(t, path(name), p)
	}
	use := func(name string) {
		u := c.newUse()
		get(name, u)
		u.release()
	}

	use("a")
	use("b")
	use("a") // a is now more recent than b
	use("c") // 3000 bytes: b, the least recently used, goes
	require.NoFileExists(t, path("b"))
	require.FileExists(t, path("a"))
	require.FileExists(t, path("c"))
	total, n := c.usage()
	require.Equal(t, int64(2000), total)
	require.Equal(t, 2, n)

	// c is held by a running attempt: d pushes a out though a was used after
	// c, since c is in use.
	held := c.newUse()
	get("c", held)
	use("a")
	use("d")
	require.FileExists(t, path("c"))
	require.FileExists(t, path("d"))
	require.NoFileExists(t, path("a"))

	// A cap smaller than one entry: what is held stays, the rest goes.
	c.max = 0
	use("d")
	require.FileExists(t, path("c"))
	require.NoFileExists(t, path("d"))
	held.release()
	require.NoFileExists(t, path("c"))

	// A new cache over a directory finds its entries and applies its cap.
	c.max = 2500
	use("a")
	use("b")
	c.close()
	crashed := filepath.Join(dir, "tmp", "bundle-123", "tree")
	require.NoError(t, os.MkdirAll(crashed, 0o555))
	restarted, err := newFileCache(dir, blobs, 1000)
	require.NoError(t, err)
	require.NoDirExists(t, filepath.Dir(crashed), "a crashed install's leftovers are removed")
	total, n = restarted.usage()
	require.Equal(t, int64(1000), total)
	require.Equal(t, 1, n)
	restarted.close()
}

// TestFileCacheShared: a cache directory another dispatcher holds evicts
// nothing, since that one's attempts may use any entry; it is free again once
// the first is closed.
func TestFileCacheShared(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	obj, err := blobs.Put(ctx, blobstore.KindPayloads, bytes.NewReader(bytes.Repeat([]byte("x"), 1000)), blobstore.PutOptions{})
	require.NoError(t, err)
	dir := t.TempDir()
	first, err := newFileCache(dir, blobs, 0)
	require.NoError(t, err)
	require.False(t, first.shared)
	second, err := newFileCache(dir, blobs, 0)
	require.NoError(t, err)
	require.True(t, second.shared)
	u := second.newUse()
	p, err := second.blobFile(ctx, blobstore.ObjectRef(obj), u)
	require.NoError(t, err)
	u.release()
	require.FileExists(t, p, "a shared cache evicts nothing")
	second.close()
	first.close()
	third, err := newFileCache(dir, blobs, 0)
	require.NoError(t, err)
	require.False(t, third.shared)
	require.NoFileExists(t, p, "the directory's own cache applies its cap")
	third.close()
}
