package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestRefusedOutputsFreeTheServer is refused outputs (docs/functions.md,
// invalid_output) through the real binary: on a server of 2 slots
// (CAIRN_CONCURRENCY=2), with S3 for its blobs, a map of 50 exec instances that
// each print a JSON \u0000 fails with code invalid_output; a run of it canceled
// while its instances run ends canceled; and an unrelated run completes. Before,
// each instance's outcome was retried every 500 ms for ever: both slots held until
// a restart.
func TestRefusedOutputsFreeTheServer(t *testing.T) {
	t.Parallel()
	s3, bucket := testenv.S3Bucket(t)
	st := newStack(t, stackOptions{blobURL: s3.URL(bucket), env: s3.Env()})
	s := st.start(serverOptions{env: []string{"CAIRN_CONCURRENCY=2"}})
	api := s.api()
	gate := t.TempDir()
	api.deploy(map[string]string{
		"cairn.yaml": `name: nul-map
steps:
  - key: each
    map: {over: "input.items", max_parallel: 50}
    exec: ["./bin/nul", "` + gate + `"]
    retry: {max_attempts: 3, backoff: fixed, delay: 10ms}
`,
		// Waits for the gate when the run's input says so, then prints a JSON
		// \u0000, which PostgreSQL's jsonb refuses.
		"bin/nul": "#!/bin/sh\nenv=$(cat)\ncase \"$env\" in *'\"wait\":true'*) touch \"$1/started\"; while [ ! -e \"$1/open\" ]; do sleep 0.05; done;; esac\n" +
			"printf '%s\\n' '{\"a\": \"\\u0000\"}'\n",
	})
	items := make([]int, 50)
	for i := range items {
		items[i] = i
	}
	id := api.startRun("nul-map", 0, map[string]any{"items": items})
	run := api.waitRun(id, 2*time.Minute)
	require.Equal(t, client.RunStatusFailed, run.Status)
	each := api.mustStep(id, "each")
	require.Equal(t, "map_failed", errorOf(each.LastError).Code)
	var failures struct {
		Failures []struct{ Error apiError } `json:"failures"`
	}
	require.NoError(t, json.Unmarshal(jsonOf(each.LastError), &failures))
	require.NotEmpty(t, failures.Failures)
	for _, f := range failures.Failures {
		require.Equal(t, "invalid_output", f.Error.Code)
		require.Equal(t, "output: PostgreSQL refused the value: unsupported Unicode escape sequence (22P05)", f.Error.Message)
		require.False(t, f.Error.Retryable)
	}

	// Canceled while both slots run instances that wait for the gate.
	id = api.startRun("nul-map", 0, map[string]any{"wait": true, "items": items})
	require.Eventually(t, func() bool {
		_, err := os.Stat(filepath.Join(gate, "started"))
		return err == nil
	}, time.Minute, 10*time.Millisecond, "waiting for an instance to start")
	ctx, cancel := withTimeout(30 * time.Second)
	defer cancel()
	resp, err := api.cl.CancelRunWithResponse(ctx, api.runID(id), client.CancelRunJSONRequestBody{})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), "%s", resp.Body)
	require.NoError(t, os.WriteFile(filepath.Join(gate, "open"), nil, 0o644))
	require.Equal(t, client.RunStatusCanceled, api.waitRun(id, time.Minute).Status)

	// The slots are free for an unrelated run.
	api.deploy(map[string]string{"cairn.yaml": `name: unrelated
steps:
  - {key: a, builtin: echo, with: {value: 1}}
  - {key: b, needs: [a], exec: ["./bin/b"]}
`, "bin/b": "#!/bin/sh\ncat >/dev/null\necho 2\n"})
	other := api.startRun("unrelated", 0, map[string]any{})
	require.Equal(t, client.RunStatusSucceeded, api.waitRun(other, time.Minute).Status)
	require.JSONEq(t, "2", string(api.output(other, "b")))
	require.NotContains(t, tailFile(s.logPath, 4<<20), "record the outcome failed; retrying", "no outcome was retried")
}
