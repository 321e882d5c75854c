package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// payloadKey is the key of a payload object whose digest is made of s.
func payloadKey(s string) (digest, key string) {
	digest = fakeDigest(s)
	return digest, "payloads/sha256/" + digest[7:]
}

func blobRefs(t *testing.T, s *catalog.Store, grace time.Duration) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	require.NoError(t, s.BlobRefs(t.Context(), grace, func(k string) { out[k] = true }))
	return out
}

// TestBlobRefs: the collector's mark sees references at any depth of a step's
// output and of events, attempts' logs, versions' bundles and recent claims, and
// no longer sees those of a run deleted without archive; a run deleted with its
// archive keeps what it named referenced.
func TestBlobRefs(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	retentionVersion(t, s, "gc", "")
	kept := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 0)
	archived := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 2*time.Hour)
	dropped := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 2*time.Hour)

	setOutput := func(id uuid.UUID, v string) {
		_, err := s.DB().ExecContext(ctx, `UPDATE steps SET output = $2 WHERE run_id = $1`, id, v)
		require.NoError(t, err)
	}
	d1, k1 := payloadKey("nested")
	d2, k2 := payloadKey("archived")
	d3, k3 := payloadKey("dropped")
	_, k4 := payloadKey("claimed")
	_, k5 := payloadKey("nobody")
	setOutput(kept, fmt.Sprintf(`[1, {"x": {"$blob": {"digest": %q, "size": 3}}}]`, d1))
	setOutput(archived, fmt.Sprintf(`{"$blob": {"digest": %q, "size": 3}}`, d2))
	setOutput(dropped, fmt.Sprintf(`{"$blob": {"digest": %q, "size": 3}}`, d3))
	_, err := s.DB().ExecContext(ctx, `UPDATE attempts SET log_key = 'logs/sha256/' || $2 WHERE run_id = $1`, archived, d1[7:])
	require.NoError(t, err)
	require.NoError(t, s.BlobClaim(ctx, k4))

	refs := blobRefs(t, s, time.Hour)
	for _, k := range []string{k1, k2, k3, k4, "logs/sha256/" + d1[7:]} {
		require.True(t, refs[k], "%s is referenced", k)
	}
	require.False(t, refs[k5])
	var bundleKey string
	require.NoError(t, s.DB().GetContext(ctx, &bundleKey, `SELECT blob_key FROM bundles`))
	require.True(t, refs[bundleKey], "the version's bundle is referenced")

	deleted, err := s.RunsDelete(ctx, catalog.RetentionDefaults{Succeeded: time.Hour},
		[]uuid.UUID{archived, dropped}, map[uuid.UUID]string{archived: "archives/sha256/" + d2[7:]})
	require.NoError(t, err)
	require.Len(t, deleted, 2)
	refs = blobRefs(t, s, time.Hour)
	require.True(t, refs[k2], "the archived run's output stays referenced")
	require.True(t, refs["logs/sha256/"+d1[7:]], "the archived run's log stays referenced")
	require.False(t, refs[k3], "the run deleted without archive no longer references its output")

	// A claim older than the grace protects nothing.
	require.False(t, blobRefs(t, s, 0)[k4])
}

// TestBlobSweep: the sweep hands only unreferenced, unclaimed keys to del, and
// a claim made while the sweep holds its locks waits for it to end.
func TestBlobSweep(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	retentionVersion(t, s, "gc", "")
	run := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 0)
	d1, k1 := payloadKey("used")
	_, k2 := payloadKey("claimed")
	_, k3 := payloadKey("garbage")
	_, k4 := payloadKey("late")
	_, err := s.DB().ExecContext(ctx, `UPDATE steps SET output = $2 WHERE run_id = $1`, run,
		json.RawMessage(fmt.Sprintf(`{"$blob": {"digest": %q, "size": 3}}`, d1)))
	require.NoError(t, err)
	require.NoError(t, s.BlobClaim(ctx, k2))

	claimed := make(chan error, 1)
	deleted, err := s.BlobSweep(ctx, []string{k1, k2, k3, k4}, time.Hour, func(ctx context.Context, unref []string) ([]string, error) {
		slices.Sort(unref)
		want := []string{k3, k4}
		slices.Sort(want)
		require.Equal(t, want, unref)
		// A writer claims k4 now: it must wait until the sweep commits.
		go func() { claimed <- s.BlobClaim(context.Background(), k4) }()
		// Wait until the claim is blocked on the sweep's lock.
		require.Eventually(t, func() bool {
			var n int
			require.NoError(t, s.DB().GetContext(ctx, &n, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`))
			return n > 0
		}, 30*time.Second, 10*time.Millisecond)
		require.Empty(t, claimed, "a claim of a key being swept waits for the sweep")
		return unref, nil
	})
	require.NoError(t, err)
	require.Len(t, deleted, 2)
	require.NoError(t, <-claimed)
	refs, err := s.BlobsReferenced(ctx, []string{k1, k2, k3, k4}, time.Hour)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{k1: true, k2: true, k4: true}, refs)
}
