package api_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/runtime"
)

// TestLiveLogTail: a handler prints a line every 200 ms for three seconds; while it
// runs, its log is read through the API (a server that shares only the catalog and
// the blob store with the dispatcher), in pieces from the offset the previous
// piece ended at. Lines appear while the attempt still runs, and the pieces read
// until Cairn-Log-Complete, glued, are exactly the log stored at the end.
func TestLiveLogTail(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	blobs, err := blobstore.NewFile(tb.blobDir, nil)
	require.NoError(t, err)
	d, err := runtime.New(tb.store, blobs, &runtime.Config{
		PollInterval: 50 * time.Millisecond,
		Handlers:     runtime.HandlerConfig{CacheDir: t.TempDir()},
		Limits:       runtime.Limits{LiveLogInterval: 100 * time.Millisecond},
	})
	require.NoError(t, err)
	require.NoError(t, d.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, d.Stop(ctx))
	})

	a := tb.send(t, http.MethodPost, "/v1/bundles", map[string]string{"Content-Type": "application/gzip"}, archive(t,
		entry{name: "cairn.yaml", body: "name: chatty\nsteps:\n  - {key: talk, exec: [./bin/talk]}\n"},
		entry{name: "bin/talk", mode: 0o755, body: "#!/bin/sh\ni=1\nwhile [ $i -le 15 ]; do echo \"line $i\" >&2; sleep 0.2; i=$((i+1)); done\necho '{}'\n"}))
	require.Contains(t, []int{http.StatusOK, http.StatusCreated}, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/workflows/chatty/runs", nil, []byte(`{}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	run := decode[struct {
		ID string `json:"id"`
	}](t, a)
	logURL := "/v1/runs/" + run.ID + "/steps/talk/logs"

	var followed strings.Builder
	var offset int64
	sawLive := false
	require.Eventually(t, func() bool {
		a := tb.send(t, http.MethodGet, logURL+"?offset="+strconv.FormatInt(offset, 10), nil, nil)
		if a.status == http.StatusNotFound { // the step has not run yet
			return false
		}
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		at, err := strconv.ParseInt(a.header.Get("Cairn-Log-Offset"), 10, 64)
		require.NoError(t, err)
		require.Equal(t, offset, at, "nothing was dropped: the log is shorter than the kept tail")
		followed.Write(a.body)
		offset += int64(len(a.body))
		complete := a.header.Get("Cairn-Log-Complete") == "true"
		if !complete && strings.Contains(followed.String(), "line 3\n") {
			sawLive = true
		}
		return complete
	}, time.Minute, 50*time.Millisecond, "following the log until the attempt ends")
	require.True(t, sawLive, "lines were readable while the attempt ran; read: %q", followed.String())

	whole := tb.send(t, http.MethodGet, logURL, nil, nil)
	require.Equal(t, http.StatusOK, whole.status)
	require.Equal(t, "true", whole.header.Get("Cairn-Log-Complete"))
	require.Contains(t, string(whole.body), "line 15\n")
	require.Equal(t, string(whole.body), followed.String())

	// The live chunks are gone once the log is stored.
	assert.Eventually(t, func() bool {
		var n int
		require.NoError(t, tb.store.DB().QueryRow(`SELECT count(*) FROM attempt_log_chunks`).Scan(&n))
		return n == 0
	}, 10*time.Second, 20*time.Millisecond, "the live tail is deleted after the log is stored")
}
