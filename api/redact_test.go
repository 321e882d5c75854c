package api_test

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestHTTPHeadersHiddenFromViewers: the credentials an http step sends in
// its headers are never shown to a viewer: not in the version's definition, not
// through a bundle download (operators only).
func TestHTTPHeadersHiddenFromViewers(t *testing.T) {
	t.Parallel()
	const viewer = "viewer-token-0123456789"
	const secret = "Bearer TARGET-SERVICE-SECRET-123"
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken + ",viewer:" + viewer)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	tb := &testBundle{store: store, url: hs.URL}

	status, up := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: `name: secret-headers
steps:
  - key: call
    http: {url: "https://example.com/fn", headers: {Authorization: "` + secret + `", X-Plain: visible-name, X-Key: {secret: api-key}}}
    compensate: {http: {url: "https://example.com/undo", headers: {Authorization: "` + secret + `"}}}
  - key: run
    exec: ["./bin/run"]
    env: {TOKEN: "` + secret + `", REF: {secret: api-key}}
`}, entry{name: "bin/run", body: "#!/bin/sh\n", mode: 0o755})))
	require.Equal(t, http.StatusCreated, status, "%v", up)

	get := func(token, path string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}
	for _, token := range []string{viewer, operatorToken} {
		status, body := get(token, "/v1/workflows/secret-headers/versions/1")
		require.Equal(t, http.StatusOK, status, body)
		require.NotContains(t, body, "TARGET-SERVICE-SECRET")
		require.NotContains(t, body, "visible-name")
		require.Contains(t, body, `"Authorization":"[redacted]"`)
		require.Contains(t, body, `"TOKEN":"[redacted]"`)
		require.Contains(t, body, `"X-Key":{"secret":"api-key"}`, "a secret reference holds a name only")
		require.Contains(t, body, `"REF":{"secret":"api-key"}`)
	}
	digest := up["digest"].(string)
	status, body := get(viewer, "/v1/bundles/"+digest)
	require.Equal(t, http.StatusForbidden, status, body)
	status, body = get(operatorToken, "/v1/bundles/"+digest)
	require.Equal(t, http.StatusOK, status)
	require.True(t, strings.HasPrefix(body, "\x1f\x8b"), "a gzip archive")
}
