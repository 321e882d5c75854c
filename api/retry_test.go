package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

const retryViewerToken = "retry-viewer-token-0123456789"

// setupNamed serves a fresh catalog to an operator token named alice (the one
// send uses) and a viewer.
func setupNamed(t *testing.T) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken + ",viewer:" + retryViewerToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, url: hs.URL}
}

// finishedChain makes a run of a three-step chain a → b → c and runs it through the
// catalog: failStep fails (not retryable), the others succeed with output {"k": key}.
func (tb *testBundle) finishedChain(t *testing.T, failStep string) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	v := catalogtest.Version(t, tb.store, "wf",
		catalog.NewStep{Key: "a", MaxAttempts: 1}, catalog.NewStep{Key: "b", Needs: []string{"a"}, MaxAttempts: 1},
		catalog.NewStep{Key: "c", Needs: []string{"b"}, MaxAttempts: 1})
	run, _, err := tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version, Input: json.RawMessage(`{"n":1}`)})
	require.NoError(t, err)
	for {
		claimed, err := tb.store.StepClaim(ctx, "test", 10, time.Minute)
		require.NoError(t, err)
		if len(claimed) == 0 {
			return run.ID
		}
		for _, c := range claimed {
			p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded,
				Output: json.RawMessage(`{"k":"` + c.Key + `"}`)}
			if c.Key == failStep {
				p = &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeFailed,
					Error: json.RawMessage(`{"message":"boom"}`)}
			}
			require.NoError(t, tb.store.StepFinish(ctx, p))
		}
	}
}

func decodeRun(t *testing.T, a *answer) api.Run {
	t.Helper()
	var r api.Run
	require.NoError(t, json.Unmarshal(a.body, &r), "%s", a.body)
	return r
}

func TestRetryRun(t *testing.T) {
	t.Parallel()
	tb := setupNamed(t)
	id := tb.finishedChain(t, "b")
	path := "/v1/runs/" + id.String() + "/retry"

	// A viewer may not.
	a := tb.sendAs(t, retryViewerToken, http.MethodPost, path, nil, []byte(`{}`))
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	// Bad input names the field.
	a = tb.send(t, http.MethodPost, path, nil, []byte(`{"version":-1}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"body.version"}, a.locations())
	a = tb.send(t, http.MethodPost, path, nil, []byte(`{"version":9}`))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Equal(t, "workflow wf has no version 9", a.problem.Detail)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+uuid.NewString()+"/retry", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)

	// The retry: 200 with the run, running again; the event names alice.
	key := map[string]string{"Idempotency-Key": "retry-1"}
	a = tb.send(t, http.MethodPost, path, key, []byte(`{}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	run := decodeRun(t, a)
	require.Equal(t, "running", run.Status)
	require.Equal(t, 2, run.StepsLeft)
	require.JSONEq(t, "null", string(run.Error))
	events, err := tb.store.EventList(context.Background(), id, run.Revision-1, 1)
	require.NoError(t, err)
	require.Equal(t, catalog.EventRunRetried, events[0].Type)
	require.JSONEq(t, `{"actor":"alice","version":1,"previous_version":1,"steps":["b","c"],"try":2}`, string(events[0].Data))

	// The same key again answers the run without a second retry; another body
	// under it is refused; without a key, the running run is a 409.
	a = tb.send(t, http.MethodPost, path, key, []byte(`{}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, run.Revision, decodeRun(t, a).Revision, "nothing written")
	a = tb.send(t, http.MethodPost, path, key, []byte(`{"version":1}`))
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "idempotency_key_reused", a.problem.Code)
	a = tb.send(t, http.MethodPost, path, nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	require.Contains(t, a.problem.Detail, "is running: only a failed or canceled run can be retried")
}

func TestRerunRun(t *testing.T) {
	t.Parallel()
	tb := setupNamed(t)
	id := tb.finishedChain(t, "")
	path := "/v1/runs/" + id.String() + "/rerun"

	a := tb.sendAs(t, retryViewerToken, http.MethodPost, path, nil, []byte(`{"from_step":"b"}`))
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	for body, loc := range map[string]string{
		`{"from_step":"Not A Step"}`:      "body.from_step",
		`{"from_step":"nope"}`:            "body.from_step",
		`{"from_step":"b","version":0.5}`: "body.version",
	} {
		a = tb.send(t, http.MethodPost, path, nil, []byte(body))
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s: %s", body, a.body)
		require.Equal(t, "validation_failed", a.problem.Code)
		require.Equal(t, []string{loc}, a.locations(), "%s", body)
	}
	// A missing field is named by Huma's message, at the body.
	a = tb.send(t, http.MethodPost, path, nil, []byte(`{}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"body"}, a.locations())
	require.Contains(t, a.problem.Errors[0].Message, "from_step")
	a = tb.send(t, http.MethodPost, path, nil, []byte(`{"from_step":"nope"}`))
	require.Equal(t, "step nope is not a step of version 1 of workflow wf", a.problem.Errors[0].Message)

	// The dry run: 200, the plan, no run.
	a = tb.send(t, http.MethodPost, path, nil, []byte(`{"from_step":"b","input":{"n":2},"dry_run":true}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"plan":{"reused":["a"],"run":["b","c"]}}`, string(a.body))

	// The rerun: 202, the run and the plan; GET shows where it comes from.
	key := map[string]string{"Idempotency-Key": "rerun-1"}
	a = tb.send(t, http.MethodPost, path, key, []byte(`{"from_step":"b","input":{"n":2}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var res api.RerunResult
	require.NoError(t, json.Unmarshal(a.body, &res))
	require.Equal(t, api.RerunPlan{Reused: []string{"a"}, Run: []string{"b", "c"}}, res.Plan)
	require.Equal(t, id.String(), *res.Run.RerunOf)
	require.Equal(t, "b", *res.Run.RerunFrom)
	a = tb.send(t, http.MethodGet, "/v1/runs/"+res.Run.ID, nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	got := decodeRun(t, a)
	require.Equal(t, id.String(), *got.RerunOf)
	require.Equal(t, "b", *got.RerunFrom)
	require.JSONEq(t, `{"n":2}`, string(got.Input))
	events, err := tb.store.EventList(context.Background(), uuid.MustParse(got.ID), 0, 1)
	require.NoError(t, err)
	require.JSONEq(t, `{"workflow":"wf","version":1,"rerun_of":"`+id.String()+`","from_step":"b","actor":"alice"}`, string(events[0].Data))

	// The same key: the same run and plan; another body under it: 409.
	a = tb.send(t, http.MethodPost, path, key, []byte(`{"from_step":"b","input":{"n":2}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var again api.RerunResult
	require.NoError(t, json.Unmarshal(a.body, &again))
	require.Equal(t, res.Run.ID, again.Run.ID)
	require.Equal(t, res.Plan, again.Plan)
	a = tb.send(t, http.MethodPost, path, key, []byte(`{"from_step":"c","input":{"n":2}}`))
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "idempotency_key_reused", a.problem.Code)

	// The new run has not ended: it cannot be rerun yet.
	a = tb.send(t, http.MethodPost, "/v1/runs/"+res.Run.ID+"/rerun", nil, []byte(`{"from_step":"b"}`))
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+uuid.NewString()+"/rerun", nil, []byte(`{"from_step":"b"}`))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
}

// TestStepHistory: after a retry, GET /v1/runs/{id}/step-history lists the steps
// the retry replaced (here b, failed, and c, skipped) with their try, as they were;
// GET …/steps lists the current try's. A run never retried has none; an unknown
// run is a 404.
func TestStepHistory(t *testing.T) {
	t.Parallel()
	tb := setupNamed(t)
	id := tb.finishedChain(t, "b")
	path := "/v1/runs/" + id.String() + "/step-history"
	type items struct {
		Items []api.TriedStep `json:"items"`
	}
	list := func() []api.TriedStep {
		t.Helper()
		a := tb.sendAs(t, retryViewerToken, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var got items
		require.NoError(t, json.Unmarshal(a.body, &got), "%s", a.body)
		return got.Items
	}
	require.Empty(t, list())
	a := tb.send(t, http.MethodGet, "/v1/runs/"+uuid.NewString()+"/step-history", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)

	a = tb.send(t, http.MethodPost, "/v1/runs/"+id.String()+"/retry", nil, []byte(`{}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	got := list()
	require.Len(t, got, 2)
	require.Equal(t, 1, got[0].Try)
	require.Equal(t, "b", got[0].Step.Key)
	require.Equal(t, "failed", got[0].Step.Status)
	require.JSONEq(t, `{"message":"boom"}`, string(got[0].Step.LastError))
	require.NotNil(t, got[0].Step.FinishedAt)
	require.Equal(t, 1, got[1].Try)
	require.Equal(t, "c", got[1].Step.Key)
	require.Equal(t, "skipped", got[1].Step.Status)
}
