package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestBulkCancelOperation: POST /v1/runs:bulk creates an operation over the runs the
// filter matches now; GET /v1/operations/{id} shows its progress while servers work
// it (here the test works it, as a dispatcher would), and …/runs what it did to
// each run, skipped ones with the reason.
func TestBulkCancelOperation(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	catalogtest.Version(t, tb.store, "bulk", catalog.NewStep{Key: "a", MaxAttempts: 1})
	var ids []uuid.UUID
	for range 5 {
		r, _, err := tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "bulk"})
		require.NoError(t, err)
		ids = append(ids, r.ID)
	}
	require.NoError(t, tb.store.RunCancel(ctx, ids[0], "earlier"))

	a := tb.send(t, http.MethodPost, "/v1/runs:bulk", nil, []byte(`{"action":"cancel","filter":{"workflow":"bulk"}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var op struct {
		ID        string `json:"id"`
		Action    string `json:"action"`
		Status    string `json:"status"`
		Actor     string `json:"actor"`
		Total     int    `json:"total"`
		Processed int    `json:"processed"`
		Applied   int    `json:"applied"`
		Skipped   int    `json:"skipped"`
	}
	require.NoError(t, json.Unmarshal(a.body, &op))
	require.Equal(t, "cancel", op.Action)
	require.Equal(t, "running", op.Status)
	require.Equal(t, "operator", op.Actor, "an unnamed token acts under its role")
	require.Equal(t, 5, op.Total)

	id := uuid.MustParse(op.ID)
	held, err := tb.store.OperationClaim(ctx, "test", time.Minute)
	require.NoError(t, err)
	require.Equal(t, id, held.ID)
	_, err = tb.store.OperationStep(ctx, id, "test", 2, time.Minute)
	require.NoError(t, err)
	a = tb.send(t, http.MethodGet, "/v1/operations/"+op.ID, nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.NoError(t, json.Unmarshal(a.body, &op))
	require.Equal(t, "running", op.Status)
	require.Equal(t, 2, op.Processed)

	for op.Status == "running" {
		got, err := tb.store.OperationStep(ctx, id, "test", 2, time.Minute)
		require.NoError(t, err)
		op.Status = string(got.Status)
	}
	a = tb.send(t, http.MethodGet, "/v1/operations/"+op.ID, nil, nil)
	require.NoError(t, json.Unmarshal(a.body, &op))
	require.Equal(t, "succeeded", op.Status)
	require.Equal(t, 5, op.Processed)
	require.Equal(t, 4, op.Applied)
	require.Equal(t, 1, op.Skipped)

	// Two pages of what it did, newest run first.
	var seen []string
	url := "/v1/operations/" + op.ID + "/runs?limit=3"
	for url != "" {
		a = tb.send(t, http.MethodGet, url, nil, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var page struct {
			Items []struct {
				RunID   string `json:"run_id"`
				Outcome string `json:"outcome"`
				Detail  string `json:"detail"`
			} `json:"items"`
			NextCursor string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(a.body, &page))
		for _, it := range page.Items {
			seen = append(seen, it.RunID)
			if it.RunID == ids[0].String() {
				require.Equal(t, "skipped", it.Outcome)
				require.Contains(t, it.Detail, "already ended")
			} else {
				require.Equal(t, "applied", it.Outcome)
			}
		}
		url = ""
		if page.NextCursor != "" {
			url = "/v1/operations/" + op.ID + "/runs?limit=3&cursor=" + page.NextCursor
		}
	}
	require.Equal(t, []string{ids[4].String(), ids[3].String(), ids[2].String(), ids[1].String(), ids[0].String()}, seen)
}

// TestBulkBadRequests: an unknown action or status, or an operation ID that is no
// UUID, is a 422 naming the field; an unknown operation a 404.
func TestBulkBadRequests(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	a := tb.send(t, http.MethodPost, "/v1/runs:bulk", nil, []byte(`{"action":"explode","filter":{}}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "body.action")
	a = tb.send(t, http.MethodPost, "/v1/runs:bulk", nil, []byte(`{"action":"cancel","filter":{"status":"sleeping"}}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "body.filter.status")
	a = tb.send(t, http.MethodGet, "/v1/operations/"+uuid.NewString(), nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.send(t, http.MethodGet, "/v1/operations/nope", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "path.id")
}
