package catalog_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
)

// TestBlobIndex: the index records which object holds which content, the last
// record winning; the collector's mark sees the key a reference records (an
// object under a key of its own) and the content address of a reference
// without one (written before keys were recorded); a sweep that deletes an
// object drops its record.
func TestBlobIndex(t *testing.T) {
	t.Parallel()
	ctx, tb := setup(t)
	s := tb.store
	digest, address := payloadKey("large content")
	own1 := "payloads/u/" + strings.Repeat("1", 64)
	own2 := "payloads/u/" + strings.Repeat("2", 64)

	key, err := s.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Empty(t, key, "nothing recorded")
	require.NoError(t, s.BlobRecord(ctx, address, own1))
	key, err = s.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Equal(t, own1, key)
	require.NoError(t, s.BlobRecord(ctx, address, own2))
	key, err = s.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Equal(t, own2, key, "the last record wins")

	retentionVersion(t, s, "gc", "")
	withKey := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 0)
	oldForm := endedRun(t, ctx, s, "gc", uuid.Nil, catalog.OutcomeSucceeded, 0)
	oldDigest, oldAddress := payloadKey("written before keys")
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET output = $2 WHERE run_id = $1`, withKey,
		fmt.Sprintf(`{"$blob": {"digest": %q, "size": 3, "key": %q}}`, digest, own2))
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `UPDATE steps SET output = $2 WHERE run_id = $1`, oldForm,
		fmt.Sprintf(`{"$blob": {"digest": %q, "size": 3}}`, oldDigest))
	require.NoError(t, err)
	refs := blobRefs(t, s, 0)
	require.True(t, refs[own2], "a reference's key is marked")
	require.False(t, refs[address], "not the content address of a reference with a key")
	require.True(t, refs[oldAddress], "a reference without a key marks its content address")

	ok, err := s.BlobGCTake(ctx, "pass", time.Minute, 0)
	require.NoError(t, err)
	require.True(t, ok)
	deleted, err := s.BlobSweep(ctx, "pass", []string{own2}, time.Hour, func(_ context.Context, unref []string) ([]string, error) {
		return unref, nil
	})
	require.NoError(t, err)
	require.Equal(t, []string{own2}, deleted)
	key, err = s.BlobLookup(ctx, address)
	require.NoError(t, err)
	require.Empty(t, key, "the sweep dropped the record of the object it deleted")
}
