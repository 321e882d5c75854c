package api_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/maintenance"
)

// TestArchivedRun: a run past its retention, with archive: true, is archived to
// S3 and deleted by the reaper; GET /v1/archived-runs/{id} then reads back the
// run, its steps, attempts and events equal to what GET showed before.
func TestArchivedRun(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := catalog.New(testenv.DB(t), nil)
	blobs := testenv.Blobs(t)
	tokens, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	get := func(path string) (int, json.RawMessage) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+operatorToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b
	}
	items := func(b json.RawMessage) []json.RawMessage {
		var v struct {
			Items []json.RawMessage `json:"items"`
		}
		require.NoError(t, json.Unmarshal(b, &v))
		return v.Items
	}

	var sum [32]byte
	_, _ = rand.Read(sum[:])
	digest := "sha256:" + hex.EncodeToString(sum[:])
	_, _, err = store.VersionRegister(ctx, &catalog.VersionRegisterParams{
		Workflow: "kept", Digest: digest, Size: 1, BlobKey: "bundles/sha256/" + digest[7:],
		Definition:  json.RawMessage(`{"steps":[{"key":"s","needs":[]}],"retention":{"succeeded_s":60,"archive":true}}`),
		Fingerprint: digest, Steps: []catalog.NewStep{{Key: "s", MaxAttempts: 2}},
	})
	require.NoError(t, err)
	run, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "kept", Input: json.RawMessage(`{"n":1}`),
		Labels: catalog.Labels{"team": "a"}})
	require.NoError(t, err)
	// A failed attempt, then a success.
	for _, outcome := range []catalog.Outcome{catalog.OutcomeFailed, catalog.OutcomeSucceeded} {
		var claimed []catalog.Claimed
		require.Eventually(t, func() bool {
			claimed, err = store.StepClaim(ctx, "test", 1, time.Minute)
			require.NoError(t, err)
			return len(claimed) == 1
		}, 10*time.Second, 10*time.Millisecond)
		p := &catalog.StepFinishParams{RunID: run.ID, Key: "s", LeaseToken: claimed[0].LeaseToken, Outcome: outcome}
		if outcome == catalog.OutcomeFailed {
			p.Error, p.Retryable = json.RawMessage(`{"message":"flaky"}`), true
		} else {
			p.Output = json.RawMessage(`{"ok":true}`)
		}
		require.NoError(t, store.StepFinish(ctx, p))
	}
	_, err = store.DB().ExecContext(ctx, `UPDATE runs SET finished_at = now() - interval '2 minutes' WHERE id = $1`, run.ID)
	require.NoError(t, err)

	id := run.ID.String()
	status, runBefore := get("/v1/runs/" + id)
	require.Equal(t, http.StatusOK, status, string(runBefore))
	require.Contains(t, string(runBefore), `"succeeded"`)
	_, stepsBefore := get("/v1/runs/" + id + "/steps")
	_, attemptsBefore := get("/v1/runs/" + id + "/steps/s/attempts")
	_, eventsBefore := get("/v1/runs/" + id + "/events")
	require.Len(t, items(attemptsBefore), 2)

	require.Equal(t, 1, maintenance.NewReaper(store, blobs, nil).Reap(ctx))

	status, _ = get("/v1/runs/" + id)
	require.Equal(t, http.StatusNotFound, status)
	status, body := get("/v1/archived-runs/" + id)
	require.Equal(t, http.StatusOK, status, string(body))
	var archived struct {
		Run      json.RawMessage   `json:"run"`
		Steps    []json.RawMessage `json:"steps"`
		Attempts []json.RawMessage `json:"attempts"`
		Events   []json.RawMessage `json:"events"`
		BlobKey  string            `json:"blob_key"`
	}
	require.NoError(t, json.Unmarshal(body, &archived))
	require.JSONEq(t, string(runBefore), string(archived.Run))
	require.Len(t, archived.Steps, 1)
	// The step as the archive has it, without the live list's extras.
	var stepLive, stepArchived map[string]any
	require.NoError(t, json.Unmarshal(items(stepsBefore)[0], &stepLive))
	require.NoError(t, json.Unmarshal(archived.Steps[0], &stepArchived))
	for k, v := range stepArchived {
		require.Equal(t, stepLive[k], v, "step field %s", k)
	}
	require.Equal(t, len(stepLive), len(stepArchived))
	require.Equal(t, len(items(attemptsBefore)), len(archived.Attempts))
	for i, a := range items(attemptsBefore) {
		require.JSONEq(t, string(a), string(archived.Attempts[i]))
	}
	require.Equal(t, len(items(eventsBefore)), len(archived.Events))
	for i, e := range items(eventsBefore) {
		require.JSONEq(t, string(e), string(archived.Events[i]))
	}
	require.Regexp(t, `^archives/sha256/[0-9a-f]{64}$`, archived.BlobKey)

	status, _ = get("/v1/archived-runs/" + "0190d5c2-0000-7000-8000-000000000000")
	require.Equal(t, http.StatusNotFound, status)
}

// TestRetentionAtDeploy: a bad retention is refused at deploy naming the field; a
// good one reaches the version's retention columns, which the reaper reads.
func TestRetentionAtDeploy(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	deploy := func(m string) (int, map[string]any) {
		return tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: m})))
	}
	status, out := deploy("name: orders\nretention: {succeeded: 7d, failed: 10s}\nsteps:\n  - {key: a, builtin: noop}\n")
	require.Equal(t, http.StatusBadRequest, status, "%v", out)
	require.Equal(t, "invalid_bundle", out["code"])
	errs := out["errors"].([]any)
	require.Len(t, errs, 1)
	require.Equal(t, "cairn.yaml#retention.failed", errs[0].(map[string]any)["location"])

	status, out = deploy("name: orders\nretention: {succeeded: 7d, canceled: forever, archive: true}\nsteps:\n  - {key: a, builtin: noop}\n")
	require.Equal(t, http.StatusCreated, status, "%v", out)
	var cols struct {
		Succeeded *int64 `db:"retain_succeeded_s"`
		Failed    *int64 `db:"retain_failed_s"`
		Canceled  *int64 `db:"retain_canceled_s"`
		Archive   *bool  `db:"retain_archive"`
	}
	require.NoError(t, tb.store.DB().GetContext(t.Context(), &cols,
		`SELECT retain_succeeded_s, retain_failed_s, retain_canceled_s, retain_archive FROM workflow_versions WHERE workflow = 'orders'`))
	require.EqualValues(t, 7*24*3600, *cols.Succeeded)
	require.Nil(t, cols.Failed)
	require.EqualValues(t, -1, *cols.Canceled)
	require.True(t, *cols.Archive)
}
