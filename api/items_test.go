package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestMapItems: a map step's instances are paged by index and filtered by state;
// each one's output and attempts are reached by index; the step list shows the map's
// progress and not its instances.
func TestMapItems(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	ctx := context.Background()
	s := tb.store
	v := catalogtest.Version(t, s, "wf", catalog.NewStep{Key: "m", MaxAttempts: 1})
	run, _, err := s.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "wf", Version: v.Version})
	require.NoError(t, err)
	claimed, err := s.StepClaim(ctx, "d1", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	m := claimed[0]
	require.NoError(t, s.MapStart(ctx, catalog.Lease{RunID: m.RunID, Key: m.Key, Token: m.LeaseToken},
		&catalog.MapStartParams{MaxParallel: 5, Items: json.RawMessage(`["a","b","c","d","e"]`)}))
	w := catalog.MapWorker{Finish: func(context.Context, *catalog.MapState, iter.Seq2[*catalog.MapItem, error], []catalog.MapItem) (catalog.Resolution, error) {
		return catalog.Resolution{Outcome: catalog.OutcomeSucceeded, Output: json.RawMessage(`[]`)}, nil
	}}
	created, _, err := s.MapWork(ctx, catalog.MapRef{RunID: run.ID, Key: "m"}, w)
	require.NoError(t, err)
	require.Equal(t, 5, created)
	claimed, err = s.StepClaim(ctx, "d1", 10, time.Minute)
	require.NoError(t, err)
	for _, c := range claimed {
		p := &catalog.StepFinishParams{RunID: c.RunID, Key: c.Key, LeaseToken: c.LeaseToken, Outcome: catalog.OutcomeSucceeded,
			Output: json.RawMessage(fmt.Sprintf(`{"i":%d}`, *c.MapIndex))}
		if *c.MapIndex == 3 {
			p.Outcome, p.Output, p.Error = catalog.OutcomeFailed, nil, json.RawMessage(`{"message":"boom"}`)
		}
		require.NoError(t, s.StepFinish(ctx, p))
	}

	base := "/v1/runs/" + run.ID.String() + "/steps/m"
	a := tb.send(t, http.MethodGet, base+"/items?limit=2", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var page struct {
		Items []struct {
			Index  int64           `json:"index"`
			Key    string          `json:"key"`
			Status string          `json:"status"`
			Item   json.RawMessage `json:"item"`
			Output json.RawMessage `json:"output"`
		} `json:"items"`
		NextAfter *int64 `json:"next_after"`
	}
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.Len(t, page.Items, 2)
	require.Equal(t, "m[0]", page.Items[0].Key)
	require.JSONEq(t, `"a"`, string(page.Items[0].Item))
	require.JSONEq(t, `{"i":1}`, string(page.Items[1].Output))
	require.EqualValues(t, 1, *page.NextAfter)
	a = tb.send(t, http.MethodGet, base+"/items?limit=10&after=1", nil, nil)
	page.NextAfter = nil
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.Len(t, page.Items, 3)
	require.Nil(t, page.NextAfter)
	a = tb.send(t, http.MethodGet, base+"/items?status=failed", nil, nil)
	require.NoError(t, json.Unmarshal(a.body, &page))
	require.Len(t, page.Items, 1)
	require.EqualValues(t, 3, page.Items[0].Index)

	a = tb.send(t, http.MethodGet, base+"/items/2/output", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"i":2}`, string(a.body))
	a = tb.send(t, http.MethodGet, "/v1/runs/"+run.ID.String()+"/steps/m%5B2%5D/output", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "an instance by its own key: %s", a.body)
	require.JSONEq(t, `{"i":2}`, string(a.body))
	a = tb.send(t, http.MethodGet, base+"/items/3/output", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status)
	a = tb.send(t, http.MethodGet, base+"/items/3/attempts", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Contains(t, string(a.body), `"status":"failed"`)
	a = tb.send(t, http.MethodGet, base+"/items/3/logs", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	a = tb.send(t, http.MethodGet, base+"/items/99/attempts", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status)

	a = tb.send(t, http.MethodGet, "/v1/runs/"+run.ID.String()+"/steps", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	var steps struct {
		Items []struct {
			Key string          `json:"key"`
			Map json.RawMessage `json:"map"`
		} `json:"items"`
	}
	require.NoError(t, json.Unmarshal(a.body, &steps))
	require.Len(t, steps.Items, 1, "instances are not steps of the list")
	require.JSONEq(t, `{"created":5,"total":5,"succeeded":4,"failed":1,"running":0}`, string(steps.Items[0].Map))
}
