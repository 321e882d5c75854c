package catalog_test

import (
	"context"
	"fmt"
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

// TestBlobSweep: the sweep of a pass that holds the collector's lease hands
// del only the keys nobody claimed within its window (the mark's age plus the
// grace) and that no archive names, without reading the run tables (the mark
// left out what their rows name); a claim made while the sweep holds its locks
// waits for it to end; a pass that lost the lease sweeps nothing.
func TestBlobSweep(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	_, recent := payloadKey("claimed just now")
	_, early := payloadKey("claimed before the mark")
	_, stale := payloadKey("claimed before the window")
	_, archived := payloadKey("named by an archive")
	_, garbage := payloadKey("garbage")
	_, late := payloadKey("claimed during the sweep")
	for _, k := range []string{recent, early, stale} {
		require.NoError(t, s.BlobClaim(ctx, k))
	}
	// The window is three hours: a mark that began two hours ago, a grace of one.
	_, err := s.DB().ExecContext(ctx, `UPDATE blob_claims SET claimed_at = now() - $2::interval WHERE blob_key = $1`, early, "150 minutes")
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `UPDATE blob_claims SET claimed_at = now() - $2::interval WHERE blob_key = $1`, stale, "200 minutes")
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO archived_blobs (blob_key, run_id) VALUES ($1, $2)`, archived, uuid.New())
	require.NoError(t, err)
	const window = 3 * time.Hour
	keys := []string{recent, early, stale, archived, garbage, late}

	ok, err := s.BlobGCTake(ctx, "pass", time.Minute, 0)
	require.NoError(t, err)
	require.True(t, ok)
	claimed := make(chan error, 1)
	deleted, err := s.BlobSweep(ctx, "pass", keys, window, func(ctx context.Context, unref []string) ([]string, error) {
		want := []string{stale, garbage, late}
		require.ElementsMatch(t, want, unref)
		// A writer claims late now: it must wait until the sweep commits.
		go func() { claimed <- s.BlobClaim(context.Background(), late) }()
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
	require.ElementsMatch(t, []string{stale, garbage, late}, deleted)
	require.NoError(t, <-claimed)
	kept, err := s.BlobsKept(ctx, keys, window)
	require.NoError(t, err)
	require.Equal(t, map[string]bool{recent: true, early: true, archived: true, late: true}, kept,
		"late's claim came after the sweep; stale's was dropped with its object")

	// Another pass takes the lease once this one's has expired: this one's
	// next sweep deletes nothing.
	_, err = s.DB().ExecContext(ctx, `UPDATE blob_gc SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	ok, err = s.BlobGCTake(ctx, "other pass", time.Minute, 0)
	require.NoError(t, err)
	require.True(t, ok)
	_, err = s.BlobSweep(ctx, "pass", []string{garbage}, window, func(context.Context, []string) ([]string, error) {
		t.Error("a pass without the lease deleted something")
		return nil, nil
	})
	require.ErrorIs(t, err, catalog.ErrLeaseLost)
}
