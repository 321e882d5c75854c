package blobstore_test

import (
	"bytes"
	"cmp"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/blobstore/blobstoretest"
	"github.com/cairnrun/cairn/internal/testenv"
)

func TestS3Store(t *testing.T) {
	t.Parallel()
	blobstoretest.Exercise(t, func(t *testing.T) blobstore.Store {
		return testenv.Blobs(t)
	})
}

// TestS3StoreLargeStream is the acceptance test for streaming: 256 MiB of
// unknown length with the heap in use under 64 MiB. It does not call t.Parallel
// because it measures the whole process's heap: Go runs it before the parallel
// tests start.
func TestS3StoreLargeStream(t *testing.T) {
	blobstoretest.LargeStream(t, testenv.Blobs(t), 256<<20, 64<<20, blobstore.PutOptions{})
	t.Run("WriteOnce", func(t *testing.T) {
		blobstoretest.LargeStream(t, testenv.Blobs(t), 256<<20, 64<<20, blobstore.PutOptions{Index: blobstoretest.NewIndex()})
	})
}

// TestS3StoreWriteOnce: with an index, content over a part is stored once,
// under a key of its own, with no temporary object or copy, and recorded in the
// index; content stored before at its content address (by a Put without an
// index, as before keys of their own existed) is found there and not stored
// again.
func TestS3StoreWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, bucket := testenv.S3Bucket(t)
	s, err := blobstore.NewS3(srv.Config(bucket))
	require.NoError(t, err)
	client := rawClient(t, srv)
	objects := func() []string {
		var keys []string
		for o := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
			require.NoError(t, o.Err)
			keys = append(keys, o.Key)
		}
		return keys
	}
	idx := blobstoretest.NewIndex()

	content := blobstoretest.Bytes(40<<20, 7)
	obj, err := s.Put(ctx, blobstore.KindPayloads, onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{Index: idx})
	require.NoError(t, err)
	require.Regexp(t, `^payloads/u/[0-9a-f]{64}$`, obj.Key)
	address, err := blobstore.KeyFor(blobstore.KindPayloads, obj.Digest)
	require.NoError(t, err)
	recorded, err := idx.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Equal(t, obj.Key, recorded)
	require.Equal(t, []string{obj.Key}, objects(), "one object, no temporary one")
	stat, err := s.Stat(ctx, obj.Key)
	require.NoError(t, err)
	require.Equal(t, int64(len(content)), stat.Size)
	require.Empty(t, stat.Digest, "the key does not say the content's digest; the reference does")

	old := blobstoretest.Bytes(20<<20, 8)
	stored, err := s.Put(ctx, blobstore.KindPayloads, bytes.NewReader(old), blobstore.PutOptions{})
	require.NoError(t, err)
	again, err := s.Put(ctx, blobstore.KindPayloads, onlyReader{bytes.NewReader(old)}, blobstore.PutOptions{Index: idx})
	require.NoError(t, err)
	require.Equal(t, stored.Key, again.Key, "the content address is found")
	require.ElementsMatch(t, []string{obj.Key, stored.Key}, objects())
	for u := range client.ListIncompleteUploads(ctx, bucket, "", true) {
		require.NoError(t, u.Err)
		t.Errorf("incomplete upload left: %s", u.Key)
	}
}

// TestS3StoreWriteOnceSizes: with an index, content that ends within its first
// part goes to its content address, and longer content to a key of its own,
// whole, whether it ends within a part or at a part's end.
func TestS3StoreWriteOnceSizes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := testenv.Blobs(t)
	for _, tt := range []struct {
		size int
		own  bool
	}{{1<<20 + 1, false}, {blobstore.DefaultPartSize - 1, false}, {blobstore.DefaultPartSize, true}, {2*blobstore.DefaultPartSize + 1, true}} {
		content := blobstoretest.Bytes(tt.size, uint64(tt.size))
		obj, err := s.Put(ctx, blobstore.KindPayloads, onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{Index: blobstoretest.NewIndex()})
		require.NoError(t, err)
		_, digest, err := blobstore.ParseKey(obj.Key)
		require.NoError(t, err)
		require.Equal(t, tt.own, digest == "", "%d bytes under %s", tt.size, obj.Key)
		got, _ := readObject(t, s, obj.Key)
		require.True(t, bytes.Equal(content, got), "%d bytes stored whole", tt.size)
	}
}

// TestS3StoreLeavesNoTemporaries checks that a multipart Put, a Put of content
// already stored, and a failed Put all clean up their temporary objects,
// uploads and spool files: spooled (the default), with the spool folder
// unusable (missing: the temporary key takes over), and with spooling off.
func TestS3StoreLeavesNoTemporaries(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	for name, spoolDir := range map[string]string{"spooled": "", "unusable spool": missing, "no spool": blobstore.SpoolNone} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			srv, bucket := testenv.S3Bucket(t)
			cfg := srv.Config(bucket)
			spool := t.TempDir()
			cfg.SpoolDir = cmp.Or(spoolDir, spool)
			s, err := blobstore.NewS3(cfg)
			require.NoError(t, err)

			content := blobstoretest.Bytes(20<<20, 42) // two parts
			obj, err := s.Put(ctx, "outputs", onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{})
			require.NoError(t, err)
			require.Equal(t, int64(len(content)), obj.Size)
			_, err = s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{})
			require.NoError(t, err)
			_, err = s.Put(ctx, "outputs", bytes.NewReader(content), blobstore.PutOptions{Size: int64(len(content)) - 1})
			require.ErrorIs(t, err, blobstore.ErrSizeMismatch)
			got, stat := readObject(t, s, obj.Key)
			require.True(t, bytes.Equal(content, got), "stored content differs")
			require.Equal(t, obj.SHA256, stat.SHA256)

			client := rawClient(t, srv)
			var keys []string
			for o := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
				require.NoError(t, o.Err)
				keys = append(keys, o.Key)
			}
			require.Equal(t, []string{obj.Key}, keys)
			for u := range client.ListIncompleteUploads(ctx, bucket, "", true) {
				require.NoError(t, u.Err)
				t.Errorf("incomplete upload left: %s", u.Key)
			}
			left, err := os.ReadDir(spool)
			require.NoError(t, err)
			require.Empty(t, left, "spool files left")
		})
	}
}

// onlyReader hides every method of its reader but Read, as a pipe's would be.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

func readObject(t *testing.T, s blobstore.Store, key string) ([]byte, blobstore.Object) {
	t.Helper()
	rc, obj, err := s.Get(t.Context(), key, blobstore.GetOptions{})
	require.NoError(t, err)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	require.NoError(t, err)
	return b, obj
}

func TestS3StorePing(t *testing.T) {
	t.Parallel()
	srv, bucket := testenv.S3Bucket(t)

	s, err := blobstore.NewS3(srv.Config(bucket))
	require.NoError(t, err)
	require.NoError(t, s.Ping(t.Context()))

	missing, err := blobstore.NewS3(srv.Config(bucket + "-missing"))
	require.NoError(t, err)
	require.ErrorContains(t, missing.Ping(t.Context()), "bucket does not exist")

	cfg := srv.Config(bucket)
	cfg.SecretKey = "wrong"
	wrong, err := blobstore.NewS3(cfg)
	require.NoError(t, err)
	require.Error(t, wrong.Ping(t.Context()))
}

func TestS3StoreOpen(t *testing.T) {
	t.Parallel()
	srv, bucket := testenv.S3Bucket(t)
	env := map[string]string{}
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	s, err := blobstore.Open(t.Context(), srv.URL(bucket), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.IsType(t, &blobstore.S3Store{}, s)
	require.NoError(t, s.Ping(t.Context()))

	obj, err := s.Put(t.Context(), "outputs", bytes.NewReader([]byte("opened")), blobstore.PutOptions{})
	require.NoError(t, err)
	_, err = s.Stat(t.Context(), obj.Key)
	require.NoError(t, err)
}

func rawClient(t *testing.T, srv testenv.S3Server) *minio.Client {
	t.Helper()
	u, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	client, err := minio.New(u.Host, &minio.Options{
		Creds:  credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""),
		Region: srv.Region,
	})
	require.NoError(t, err)
	return client
}

// TestS3StoreListAndCleanTemp: List yields the objects of a kind with their
// size; CleanTemp removes the temporary objects and aborts the incomplete
// multipart uploads to ".tmp/" and to keys of kinds started before its cutoff
// (a dry run only counts them), and leaves later ones, the objects of kinds and
// uploads not Cairn's alone.
func TestS3StoreListAndCleanTemp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, bucket := testenv.S3Bucket(t)
	s, err := blobstore.NewS3(srv.Config(bucket))
	require.NoError(t, err)
	obj, err := s.Put(ctx, blobstore.KindPayloads, strings.NewReader("kept"), blobstore.PutOptions{})
	require.NoError(t, err)
	var listed []blobstore.Listed
	for o, err := range s.List(ctx, blobstore.KindPayloads) {
		require.NoError(t, err)
		listed = append(listed, o)
	}
	require.Len(t, listed, 1)
	require.Equal(t, obj.Key, listed[0].Key)
	require.Equal(t, int64(4), listed[0].Size)

	// What a crash leaves: a temporary object and an upload never completed.
	client := rawClient(t, srv)
	_, err = client.PutObject(ctx, bucket, ".tmp/crashed", strings.NewReader("leftover"), 8, minio.PutObjectOptions{})
	require.NoError(t, err)
	core := minio.Core{Client: client}
	uploadID, err := core.NewMultipartUpload(ctx, bucket, ".tmp/abandoned", minio.PutObjectOptions{})
	require.NoError(t, err)
	_, err = core.PutObjectPart(ctx, bucket, ".tmp/abandoned", uploadID, 1, strings.NewReader("part"), 4, minio.PutObjectPartOptions{})
	require.NoError(t, err)
	// A spooled Put uploads to its final key; a crash leaves that upload.
	spooledKey, err := blobstore.KeyFor(blobstore.KindPayloads, "sha256:"+strings.Repeat("ab", 32))
	require.NoError(t, err)
	_, err = core.NewMultipartUpload(ctx, bucket, spooledKey, minio.PutObjectOptions{})
	require.NoError(t, err)
	// Not ours: left alone.
	_, err = core.NewMultipartUpload(ctx, bucket, "elsewhere/upload", minio.PutObjectOptions{})
	require.NoError(t, err)

	// Before both: nothing is old enough.
	rep, err := s.CleanTemp(ctx, time.Now().Add(-time.Hour), false)
	require.NoError(t, err)
	require.Equal(t, blobstore.TempReport{}, rep)

	later := time.Now().Add(time.Hour)
	rep, err = s.CleanTemp(ctx, later, true)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Objects)
	require.Equal(t, int64(8), rep.Bytes)
	require.Equal(t, 2, rep.Uploads)
	rep, err = s.CleanTemp(ctx, later, false)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Objects)
	require.Equal(t, 2, rep.Uploads)

	var keys []string
	for o := range client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, o.Err)
		keys = append(keys, o.Key)
	}
	require.Equal(t, []string{obj.Key}, keys)
	var uploads []string
	for u := range client.ListIncompleteUploads(ctx, bucket, "", true) {
		require.NoError(t, u.Err)
		uploads = append(uploads, u.Key)
	}
	require.Equal(t, []string{"elsewhere/upload"}, uploads)
}

// TestS3StoreWriteOnceGrowingParts: an upload under a key of its own doubles
// its part size every s3PartsPerSize parts (here every 2), so that a small
// part size still reaches S3's largest object within 10,000 parts; content
// ending within a grown part, and at a grown part's end, is stored whole.
func TestS3StoreWriteOnceGrowingParts(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	srv, bucket := testenv.S3Bucket(t)
	cfg := srv.Config(bucket)
	cfg.PartSize = 5 << 20
	s, err := blobstore.NewS3(cfg)
	require.NoError(t, err)
	blobstore.SetPartsPerSize(s, 2)
	client := rawClient(t, srv)
	const mib = 1 << 20
	for _, tt := range []struct {
		size  int
		parts int
	}{
		{5*mib + 5*mib + 10*mib + 10*mib + 7*mib, 5}, // fixed 5 MiB parts would be 8
		{5*mib + 5*mib + 10*mib, 3},                  // ends at a grown part's end
	} {
		content := blobstoretest.Bytes(tt.size, uint64(tt.size))
		obj, err := s.Put(ctx, blobstore.KindPayloads, onlyReader{bytes.NewReader(content)}, blobstore.PutOptions{Index: blobstoretest.NewIndex()})
		require.NoError(t, err)
		got, _ := readObject(t, s, obj.Key)
		require.True(t, bytes.Equal(content, got), "%d bytes stored whole", tt.size)
		info, err := client.StatObject(ctx, bucket, obj.Key, minio.StatObjectOptions{})
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(info.ETag, "-"+strconv.Itoa(tt.parts)), "%d bytes in %d parts: ETag %s", tt.size, tt.parts, info.ETag)
	}
}
