package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
)

// TestCapacity: GET /v1/capacity answers a pool's demand, which rises with its
// ready steps and falls as they run and end; a tag that is not one is a 422.
func TestCapacity(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	capacity := func(query string) api.Capacity {
		t.Helper()
		a := tb.send(t, http.MethodGet, "/v1/capacity"+query, nil, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var c api.Capacity
		require.NoError(t, json.Unmarshal(a.body, &c))
		return c
	}
	require.Equal(t, api.Capacity{Tags: []string{}}, capacity(""))

	tb.makeRun(t)
	require.Equal(t, api.Capacity{Tags: []string{"cuda", "gpu"}, Claimable: 1, Demand: 1}, capacity("?tags=gpu,cuda,gpu"))
	require.NoError(t, tb.store.DispatcherBeat(context.Background(), "plain", nil))
	claimed, _, err := tb.store.StepClaimNext(context.Background(), "plain", nil, 1, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, api.Capacity{Tags: []string{}, Running: 1, Demand: 1}, capacity("?tags="))
	c := claimed[0]
	require.NoError(t, tb.store.StepFinish(context.Background(), &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key,
		LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`1`)}))
	require.Equal(t, api.Capacity{Tags: []string{}, Claimable: 1, Demand: 1}, capacity(""), "the next step")
	for tb.advance(t) {
	}
	require.Equal(t, api.Capacity{Tags: []string{}}, capacity(""), "the run ended")

	a := tb.send(t, http.MethodGet, "/v1/capacity?tags=GPU", nil, nil)
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Equal(t, []string{"query.tags"}, a.locations())
}
