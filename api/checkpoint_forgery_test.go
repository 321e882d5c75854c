package api_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
)

// TestCheckpointForgedReferenceIsStoredAsBytes: a checkpoint PUT that
// spells a $blob reference with an escape, in another key order or twice is stored
// as the bytes it is; the reference in the catalog is Cairn's own, to those bytes.
func TestCheckpointForgedReferenceIsStoredAsBytes(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	target := "sha256:" + strings.Repeat("1", 64)
	for _, forged := range []string{
		`{"\u0024blob":{"digest":"` + target + `","size":1}}`,
		`{"$blob":{"size":1,"digest":"` + target + `"}}`,
		`{"$blob":1,"$blob":{"digest":"` + target + `","size":1}}`,
		`{"nested":{"\u0024blob":{"digest":"` + target + `"}}}`,
	} {
		id, c, cred := tb.claimFirst(t)
		status, body := tb.putCheckpoint(t, id, c.Key, cred, "application/json", strings.NewReader(forged))
		require.Equal(t, http.StatusOK, status, body)
		st, err := tb.store.StepGet(context.Background(), id, c.Key)
		require.NoError(t, err)
		ref, ok := blobstore.ParseRef(json.RawMessage(st.Checkpoint))
		require.True(t, ok, "%s was stored inline as %s", forged, st.Checkpoint)
		require.NotEqual(t, target, ref.Digest, "the forged reference was trusted: %s", forged)
		key, err := ref.Key()
		require.NoError(t, err)
		blobs, err := blobstore.NewFile(tb.blobDir, nil)
		require.NoError(t, err)
		rc, _, err := blobs.Get(context.Background(), key, blobstore.GetOptions{})
		require.NoError(t, err)
		var got strings.Builder
		_, err = io.Copy(&got, rc)
		rc.Close()
		require.NoError(t, err)
		require.Equal(t, forged, got.String())
		// The blob's key was claimed against the blob collector before its Put.
		var claims int
		require.NoError(t, tb.store.DB().GetContext(context.Background(), &claims,
			`SELECT count(*) FROM blob_claims WHERE blob_key = $1`, key))
		require.Equal(t, 1, claims)
	}
}

// TestCheckpointBadTextNamed: a JSON checkpoint with text PostgreSQL
// cannot store is a 422 naming where, not a 500 (nor the catalog's fallback 400).
func TestCheckpointBadTextNamed(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	for _, body := range []string{`{"a":"\u0000"}`, "{\"a\":\"\xff\"}", `{"a":["\ud800"]}`} {
		id, c, cred := tb.claimFirst(t)
		status, resp := tb.putCheckpoint(t, id, c.Key, cred, "application/json", strings.NewReader(body))
		require.Equal(t, http.StatusUnprocessableEntity, status, "%q: %s", body, resp)
		require.Contains(t, resp, "body.a")
	}
}
