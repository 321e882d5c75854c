package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPauseResume: the four operations through HTTP: a run paused and resumed
// answers the run, its steps say blocked_by paused, the events name the token;
// pausing a finished run or resuming a running one is a 409 invalid_run_state; a
// paused workflow shows paused and creates its runs paused.
func TestPauseResume(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	runID, _ := tb.deployHello(t) // its one step is running

	type run struct {
		Status      string `json:"status"`
		PauseReason string `json:"pause_reason"`
	}
	// decode decodes into a zeroed v: fields absent from the answer stay empty.
	decode := func(a *answer, v any) {
		t.Helper()
		switch p := v.(type) {
		case *run:
			*p = run{}
		}
		require.NoError(t, json.Unmarshal(a.body, v), "%s", a.body)
	}

	a := tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/resume", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	require.Contains(t, a.problem.Detail, "running")

	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/pause", nil, []byte(`{"reason":"looking into it"}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var r run
	decode(a, &r)
	require.Equal(t, run{Status: "paused", PauseReason: "run"}, r)
	// Again: no change.
	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/pause", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)

	a = tb.send(t, http.MethodGet, "/v1/runs/"+runID+"/steps", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	var steps struct {
		Items []struct {
			Key       string          `json:"key"`
			BlockedBy json.RawMessage `json:"blocked_by"`
		} `json:"items"`
	}
	decode(a, &steps)
	require.Len(t, steps.Items, 1)
	require.JSONEq(t, `{"kind":"paused"}`, string(steps.Items[0].BlockedBy))

	a = tb.send(t, http.MethodGet, "/v1/runs?status=paused", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Contains(t, string(a.body), runID)

	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/resume", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	decode(a, &r)
	require.Equal(t, run{Status: "running"}, r)
	a = tb.send(t, http.MethodGet, "/v1/runs/"+runID+"/steps", nil, nil)
	require.NotContains(t, string(a.body), "blocked_by")

	a = tb.send(t, http.MethodGet, "/v1/runs/"+runID+"/events", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	var events struct {
		Items []struct {
			Type string          `json:"type"`
			Data json.RawMessage `json:"data"`
		} `json:"items"`
	}
	decode(a, &events)
	var control []string
	for _, e := range events.Items {
		if e.Type == "run.paused" || e.Type == "run.resumed" {
			control = append(control, e.Type+" "+string(e.Data))
		}
	}
	require.Len(t, control, 2, "one run.paused (the second pause changed nothing), one run.resumed")
	require.Contains(t, control[0], `"actor":"operator"`)
	require.Contains(t, control[0], `"reason":"looking into it"`)
	require.Contains(t, control[1], "run.resumed")

	// A finished run cannot be paused.
	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/cancel", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/runs/"+runID+"/pause", nil, nil)
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
	require.Equal(t, "invalid_run_state", a.problem.Code)
	require.Contains(t, a.problem.Detail, "canceled")

	// Unknown runs and workflows are 404; a bad id a 400 naming it; a long reason a 422.
	a = tb.send(t, http.MethodPost, "/v1/runs/00000000-0000-0000-0000-000000000000/pause", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status)
	a = tb.send(t, http.MethodPost, "/v1/runs/nope/resume", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"path.id"}, a.locations())
	a = tb.send(t, http.MethodPost, "/v1/workflows/nope/pause", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status)
	long := make([]byte, 1001)
	for i := range long {
		long[i] = 'x'
	}
	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/pause", nil, []byte(`{"reason":"`+string(long)+`"}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"body.reason"}, a.locations())

	// The workflow: paused, its new runs created paused; resumed, they are released.
	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/pause", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var w struct {
		Paused   bool    `json:"paused"`
		PausedBy *string `json:"paused_by"`
	}
	decode(a, &w)
	require.True(t, w.Paused)
	require.Equal(t, "operator", *w.PausedBy)
	a = tb.send(t, http.MethodGet, "/v1/workflows/hello", nil, nil)
	decode(a, &w)
	require.True(t, w.Paused)

	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var created struct {
		ID string `json:"id"`
		run
	}
	decode(a, &created)
	require.Equal(t, run{Status: "paused", PauseReason: "workflow"}, created.run)

	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/resume", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	decode(a, &w)
	require.False(t, w.Paused)
	require.Nil(t, w.PausedBy)
	a = tb.send(t, http.MethodGet, "/v1/runs/"+created.ID, nil, nil)
	decode(a, &r)
	require.Equal(t, run{Status: "pending"}, r)
}
