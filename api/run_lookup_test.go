package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestRunLookup: GET /v1/runs:lookup finds a run by the short ID the web UI shows
// (its last 12 hex digits) and by its first digits; an ID no run has finds none;
// a viewer may look up.
func TestRunLookup(t *testing.T) {
	t.Parallel()
	tb := setupNamed(t)
	v := catalogtest.Version(t, tb.store, "wf", catalog.NewStep{Key: "a", MaxAttempts: 1})
	run, _, err := tb.store.RunCreate(context.Background(), &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	id := run.ID.String()
	lookup := func(short string) []api.Run {
		t.Helper()
		a := tb.sendAs(t, retryViewerToken, http.MethodGet, "/v1/runs:lookup?id="+short, nil, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var got struct {
			Items []api.Run `json:"items"`
		}
		require.NoError(t, json.Unmarshal(a.body, &got), "%s", a.body)
		return got.Items
	}
	for _, short := range []string{id, id[len(id)-12:], id[:18]} {
		got := lookup(short)
		require.Len(t, got, 1, short)
		require.Equal(t, id, got[0].ID)
		require.Equal(t, "wf", got[0].Workflow)
	}
	require.Empty(t, lookup("000000000000"))
	a := tb.send(t, http.MethodGet, "/v1/runs:lookup", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "no id: %s", a.body)
}
