package ui_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/ui"
)

const viewerToken = "viewer-token-0123456789abcdef"

// TestCheckpointDownload: a step's checkpoint kept in the blob store is offered in
// the step panel as a download, not shown: the panel has the link and the
// reference, never the blob's bytes; the link streams the bytes to a logged-in
// browser (its session cookie) and refuses one that is not.
func TestCheckpointDownload(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("viewer:" + viewerToken)
	require.NoError(t, err)
	h, err := ui.New(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler(), tokens, store, nil)
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	// A run whose step has checkpointed 1 MiB into the blob store.
	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err = store.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "ckpt", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition: json.RawMessage(`{"steps":[{"key":"s","needs":[]}]}`), Fingerprint: digest,
		Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 1}},
	})
	require.NoError(t, err)
	run, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "ckpt"})
	require.NoError(t, err)
	var claimed []catalog.Claimed
	require.Eventually(t, func() bool {
		claimed, err = store.StepClaim(ctx, "test", 1, time.Minute)
		require.NoError(t, err)
		return len(claimed) == 1
	}, 10*time.Second, 10*time.Millisecond, "waiting for the step to be claimable")
	big := bytes.Repeat([]byte("0123456789abcdef"), 64<<10)
	obj, err := blobs.Put(ctx, blobstore.KindPayloads, bytes.NewReader(big), blobstore.PutOptions{ContentType: "application/octet-stream", Size: int64(len(big))})
	require.NoError(t, err)
	ref := blobstore.ObjectRef(obj).JSON()
	require.NoError(t, store.StepCheckpoint(ctx, catalog.Lease{RunID: run.ID, Key: "s", Token: claimed[0].LeaseToken}, ref, json.RawMessage(`{}`)))

	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	resp, err := browser.PostForm(hs.URL+"/ui/login", url.Values{"token": {viewerToken}, "next": {"/ui/runs"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)

	get := func(c *http.Client, path string) (*http.Response, []byte) {
		t.Helper()
		resp, err := c.Get(hs.URL + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	base := "/ui/runs/" + run.ID.String() + "/steps/s"
	resp, panel := get(browser, base)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", panel)
	require.Contains(t, string(panel), `href="`+base+`/checkpoint" id="checkpoint-download"`)
	require.Contains(t, string(panel), obj.SHA256, "the panel shows the reference")
	require.NotContains(t, string(panel), "0123456789abcdef0123456789abcdef", "never the blob's bytes")
	require.Less(t, len(panel), 64<<10)

	resp, body := get(browser, base+"/checkpoint")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment"), resp.Header.Get("Content-Disposition"))
	require.Equal(t, big, body)

	resp, _ = get(http.DefaultClient, base+"/checkpoint")
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "no session, no download")
}
