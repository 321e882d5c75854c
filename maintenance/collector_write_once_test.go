package maintenance_test

import (
	"context"
	"encoding/json"
	"io"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/blobstore/blobstoretest"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime/runtimetest"
)

// crashingPutEnv, set in the environment of this test binary run as a child
// process, holds the S3 configuration (JSON) of TestCrashingPutChild's Put.
const crashingPutEnv = "CAIRN_TEST_CRASHING_PUT_S3"

// TestCrashingPutChild is the process TestCollectorReclaimsCrashedWriteOnce
// kills in the middle of a payload's upload: run as a child with crashingPutEnv
// set, it streams an endless payload into the S3 store under a key of its own,
// with the catalog of DATABASE_URL as its index, until it is killed. Run
// directly, it has nothing to do.
func TestCrashingPutChild(t *testing.T) {
	raw := os.Getenv(crashingPutEnv)
	if raw == "" {
		return // run by the test below only
	}
	var cfg blobstore.S3Config
	require.NoError(t, json.Unmarshal([]byte(raw), &cfg))
	s, err := blobstore.NewS3(cfg)
	require.NoError(t, err)
	store, err := catalog.Open(t.Context(), os.Getenv("DATABASE_URL"), nil)
	require.NoError(t, err)
	_, err = s.Put(t.Context(), blobstore.KindPayloads, endless{}, blobstore.PutOptions{Size: -1, Claim: store.BlobClaim, Index: store})
	t.Fatalf("an endless Put returned: %v", err)
}

// endless reads as an endless stream of bytes.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i)
	}
	return len(p), nil
}

// TestCollectorReclaimsCrashedWriteOnce: a process killed in the middle of a
// payload's upload to a key of its own leaves no object, only an incomplete
// upload; a Put that completed but whose row never committed (a crash between
// the two) leaves an object no row names and its index record. The collector
// reclaims both once they are older than its grace, and drops the record; a
// payload a step's output names stays, readable through its reference.
func TestCollectorReclaimsCrashedWriteOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env := runtimetest.New(t)
	srv, bucket := testenv.S3Bucket(t)
	cfg := srv.Config(bucket)
	s, err := blobstore.NewS3(cfg)
	require.NoError(t, err)
	u, err := url.Parse(srv.Endpoint)
	require.NoError(t, err)
	client, err := minio.New(u.Host, &minio.Options{Creds: credentials.NewStaticV4(srv.AccessKey, srv.SecretKey, ""), Region: srv.Region})
	require.NoError(t, err)
	uploads := func() []minio.ObjectMultipartInfo {
		var out []minio.ObjectMultipartInfo
		for up := range client.ListIncompleteUploads(ctx, bucket, "", true) {
			require.NoError(t, up.Err)
			out = append(out, up)
		}
		return out
	}
	payloads := func() []string {
		var keys []string
		for o, err := range s.List(ctx, blobstore.KindPayloads) {
			require.NoError(t, err)
			keys = append(keys, o.Key)
		}
		return keys
	}

	// A process killed in the middle of an upload.
	raw, err := json.Marshal(cfg)
	require.NoError(t, err)
	child := exec.Command(os.Args[0], "-test.run=^TestCrashingPutChild$", "-test.count=1")
	child.Env = append(os.Environ(), crashingPutEnv+"="+string(raw), "DATABASE_URL="+env.DatabaseURL)
	child.Stdout, child.Stderr = io.Discard, io.Discard
	require.NoError(t, child.Start())
	t.Cleanup(func() { _ = child.Process.Kill(); _ = child.Wait() })
	// Wait until it has uploaded parts of its payload.
	require.Eventually(t, func() bool {
		for _, up := range uploads() {
			if strings.HasPrefix(up.Key, "payloads/u/") {
				parts, err := (&minio.Core{Client: client}).ListObjectParts(ctx, bucket, up.Key, up.UploadID, 0, 1000)
				return err == nil && len(parts.ObjectParts) >= 2
			}
		}
		return false
	}, time.Minute, 20*time.Millisecond, "the child uploads parts")
	require.NoError(t, child.Process.Kill())
	_ = child.Wait()
	require.Empty(t, payloads(), "no partial object is visible")
	require.Len(t, uploads(), 1, "an incomplete upload is left")

	// A Put that completed, and a row that never committed.
	content := blobstoretest.Bytes(20<<20, 3)
	orphan, err := s.Put(ctx, blobstore.KindPayloads, strings.NewReader(string(content)),
		blobstore.PutOptions{Claim: env.Store.BlobClaim, Index: env.Store})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(orphan.Key, "payloads/u/"), orphan.Key)
	address, err := blobstore.KeyFor(blobstore.KindPayloads, orphan.Digest)
	require.NoError(t, err)

	// A payload that a step's output names.
	catalogtest.Version(t, env.Store, "gc", catalog.NewStep{Key: "s", MaxAttempts: 1})
	named, err := s.Put(ctx, blobstore.KindPayloads, strings.NewReader(string(blobstoretest.Bytes(20<<20, 4))),
		blobstore.PutOptions{Claim: env.Store.BlobClaim, Index: env.Store})
	require.NoError(t, err)
	finishedRunWithOutput(t, ctx, env.Store, "gc", blobstore.ObjectRef(named).JSON())

	c, err := maintenance.NewCollector(env.Store, s, &maintenance.CollectorConfig{Grace: time.Second})
	require.NoError(t, err)
	// Collect until both leftovers are older than the grace, and gone.
	require.Eventually(t, func() bool {
		_, err := c.Collect(ctx, true)
		require.NoError(t, err)
		return len(uploads()) == 0 && !slices.Contains(payloads(), orphan.Key)
	}, time.Minute, 200*time.Millisecond, "the collector reclaims the crashed upload and the unnamed object")
	require.Equal(t, []string{named.Key}, payloads(), "the named payload stays")
	key, err := env.Store.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Empty(t, key, "the collected object's record is dropped")

	step, err := env.Store.StepGet(ctx, firstRun(t, ctx, env.Store), "s")
	require.NoError(t, err)
	ref, ok := blobstore.ParseRef(json.RawMessage(step.Output))
	require.True(t, ok)
	refKey, err := ref.Key()
	require.NoError(t, err)
	rc, _, err := s.Get(ctx, refKey, blobstore.GetOptions{})
	require.NoError(t, err)
	n, err := io.Copy(io.Discard, rc)
	require.NoError(t, err)
	require.NoError(t, rc.Close())
	require.Equal(t, named.Size, n)
}

// firstRun returns the id of the one run in the catalog.
func firstRun(t *testing.T, ctx context.Context, s *catalog.Store) (id uuid.UUID) {
	t.Helper()
	require.NoError(t, s.DB().GetContext(ctx, &id, `SELECT id FROM runs`))
	return id
}
