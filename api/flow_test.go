package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestConcurrencyLimits: steps over their concurrency limit stay ready and say what
// blocks them; GET /v1/limits shows the use per key; an admin changes a limit at run
// time; a run whose input gives no key is refused naming the field.
func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, nil)
	ctx := context.Background()
	gz := map[string]string{"Content-Type": "application/gzip"}
	body := archive(t, entry{name: "cairn.yaml", body: "name: tenants\n" +
		"steps: [{key: a, builtin: noop, concurrency: {key: \"input.tenant\", limit: 1}}]\n"})
	a := tb.send(t, http.MethodPost, "/v1/bundles", gz, body)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)

	var ids []string
	for range 2 {
		a = tb.send(t, http.MethodPost, "/v1/workflows/tenants/runs", nil, []byte(`{"input":{"tenant":"acme"}}`))
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		ids = append(ids, decode[struct{ ID string }](t, a).ID)
	}
	a = tb.send(t, http.MethodPost, "/v1/workflows/tenants/runs", nil, []byte(`{"input":{}}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "limit key of step")
	require.Contains(t, string(a.body), "body.input")

	claimed, err := tb.store.StepClaim(ctx, "d1", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	waiting := ids[0]
	if claimed[0].RunID.String() == waiting {
		waiting = ids[1]
	}
	a = tb.send(t, http.MethodGet, "/v1/runs/"+waiting+"/steps", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"kind":"concurrency","name":"tenants","key":"acme","in_use":1,"limit":1}`,
		string(decode[struct {
			Items []struct {
				BlockedBy json.RawMessage `json:"blocked_by"`
			}
		}](t, a).Items[0].BlockedBy))

	a = tb.sendAs(t, viewerToken, http.MethodGet, "/v1/limits", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"keys":[{"name":"tenants","key":"acme","running":1,"ready":1,"limit":1}],"overrides":[],"rates":[]}`, string(a.body))

	a = tb.send(t, http.MethodPut, "/v1/limits/tenants", nil, []byte(`{"concurrency":2}`))
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/tenants", nil, []byte(`{"concurrency":0}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/tenants", nil, []byte(`{"concurrency":2}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Equal(t, "root", decode[struct {
		UpdatedBy string `json:"updated_by"`
	}](t, a).UpdatedBy)
	claimed, err = tb.store.StepClaim(ctx, "d1", 10, time.Minute)
	require.NoError(t, err)
	require.Len(t, claimed, 1, "the raised limit lets the second start")
	a = tb.send(t, http.MethodGet, "/v1/runs/"+waiting+"/steps", nil, nil)
	require.NotContains(t, string(a.body), "blocked_by")
}
