package api_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// setupSigned is setup with a signing key, which keys the cursors too.
func setupSigned(t *testing.T, key string) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobDir := t.TempDir()
	blobs, err := blobstore.NewFile(blobDir, nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	srv := api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir(), SigningKey: []byte(key)})
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, blobDir: blobDir, url: hs.URL}
}

// TestForgedCursorRefused: a cursor minted by a client, with the checksum
// recomputed (legacyCursor), or taken from a server with another key, is a 400; the
// server's own cursors page as before, on any server sharing its signing key.
func TestForgedCursorRefused(t *testing.T) {
	t.Parallel()
	tb := setupSigned(t, "signing-key-one")
	setupWorkflows(t, tb)
	a := tb.send(t, http.MethodGet, "/v1/workflows?limit=1", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var page struct {
		Items      []struct{ Name string } `json:"items"`
		NextCursor string                  `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.NotEmpty(t, page.NextCursor)
	a = tb.send(t, http.MethodGet, "/v1/workflows?limit=1&cursor="+page.NextCursor, nil, nil)
	require.Equal(t, http.StatusOK, a.status, "the server's own cursor works: %s", a.body)
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.Equal(t, "wf-b", page.Items[0].Name)

	// Forgeries of legitimate-looking keys: refused.
	a = tb.send(t, http.MethodGet, "/v1/workflows?limit=1&cursor="+legacyCursor("workflows", "", `"wf-a"`), nil, nil)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	a = tb.send(t, http.MethodGet, "/v1/runs?cursor="+legacyCursor("runs", "\x00", `"ffffffff-ffff-ffff-ffff-ffffffffffff"`), nil, nil)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)

	// A cursor of another server with the same key is read; with another key, refused.
	peer := &testBundle{store: tb.store, url: setupSignedOn(t, tb.store, "signing-key-one")}
	a = peer.send(t, http.MethodGet, "/v1/workflows?limit=1&cursor="+firstWorkflowsCursor(t, tb), nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	other := setupSigned(t, "signing-key-two")
	setupWorkflows(t, other)
	a = tb.send(t, http.MethodGet, "/v1/workflows?limit=1&cursor="+firstWorkflowsCursor(t, other), nil, nil)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
	// A server without a signing key keys its cursors with a random key.
	a = tb.send(t, http.MethodGet, "/v1/workflows?limit=1&cursor="+firstWorkflowsCursor(t, setupWorkflows(t, setup(t))), nil, nil)
	require.Equal(t, http.StatusBadRequest, a.status, "%s", a.body)
}

// setupSignedOn serves store with another server of the signing key; it returns its URL.
func setupSignedOn(t *testing.T, store *catalog.Store, key string) string {
	t.Helper()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, SigningKey: []byte(key)}).Handler())
	t.Cleanup(hs.Close)
	return hs.URL
}

// setupWorkflows registers the workflows wf-a, wf-b and wf-c.
func setupWorkflows(t *testing.T, tb *testBundle) *testBundle {
	t.Helper()
	for _, name := range []string{"wf-a", "wf-b", "wf-c"} {
		catalogtest.Version(t, tb.store, name)
	}
	return tb
}

// firstWorkflowsCursor returns the next_cursor of the first page (one item) of workflows.
func firstWorkflowsCursor(t *testing.T, tb *testBundle) string {
	t.Helper()
	a := tb.send(t, http.MethodGet, "/v1/workflows?limit=1", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var page struct {
		NextCursor string `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.NotEmpty(t, page.NextCursor)
	return page.NextCursor
}
