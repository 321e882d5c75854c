package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
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

// TestRateLimitOverride: an admin changes a rate limit at run time through PUT
// /v1/limits/{name}; GET /v1/limits shows it and the bucket's tokens; the override
// wins over the manifest until DELETE clears it.
func TestRateLimitOverride(t *testing.T) {
	t.Parallel()
	tb := setupWithSecrets(t, nil)
	ctx := context.Background()
	gz := map[string]string{"Content-Type": "application/gzip"}
	body := archive(t, entry{name: "cairn.yaml", body: "name: calls\n" +
		"steps: [{key: a, builtin: noop, rate_limit: {name: api, limit: 1, per: 1h}}]\n"})
	a := tb.send(t, http.MethodPost, "/v1/bundles", gz, body)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	for range 4 {
		a = tb.send(t, http.MethodPost, "/v1/workflows/calls/runs", nil, []byte(`{"input":{}}`))
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	}
	claim := func() int {
		c, err := tb.store.StepClaim(ctx, "d1", 10, time.Minute)
		require.NoError(t, err)
		return len(c)
	}
	require.Equal(t, 1, claim(), "the manifest's bucket holds one token")
	require.Equal(t, 0, claim(), "the next comes in an hour")

	// Refused: nothing to change, a bad window, a viewer's token.
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/api", nil, []byte(`{}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/api", nil, []byte(`{"rate_limit":{"limit":5,"per":"forever"}}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	require.Contains(t, string(a.body), "body.rate_limit.per")
	a = tb.sendAs(t, viewerToken, http.MethodPut, "/v1/limits/api", nil, []byte(`{"rate_limit":{"limit":5,"per":"1s"}}`))
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)

	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/api", nil, []byte(`{"rate_limit":{"limit":1000,"per":"1s"}}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"limit":1000,"per":"1s"}`, rateOf(t, a.body))
	require.NotContains(t, string(a.body), "concurrency", "the concurrency limit is not touched")
	// The bucket refills at 1000 per second now: the 3 steps left start.
	got := 0
	require.Eventually(t, func() bool { got += claim(); return got == 3 }, 10*time.Second, 10*time.Millisecond,
		"waiting for the faster bucket to let the other steps start")

	a = tb.sendAs(t, viewerToken, http.MethodGet, "/v1/limits?name=api", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	lim := decode[api.Limits](t, a)
	require.Len(t, lim.Rates, 1)
	require.Equal(t, 1000, lim.Rates[0].Limit)
	require.Equal(t, "1s", lim.Rates[0].Per)
	require.GreaterOrEqual(t, lim.Rates[0].Tokens, 0.0)
	require.Len(t, lim.Overrides, 1)
	require.Equal(t, &api.RateSpec{Limit: 1000, Per: "1s"}, lim.Overrides[0].RateLimit)
	require.Nil(t, lim.Overrides[0].Concurrency)

	// A concurrency limit of the same name joins the rate, which it keeps.
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/api", nil, []byte(`{"concurrency":7}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.JSONEq(t, `{"limit":1000,"per":"1s"}`, rateOf(t, a.body))

	// Cleared: the manifest's one token an hour again.
	a = tb.sendAs(t, adminToken, http.MethodDelete, "/v1/limits/api", nil, nil)
	require.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/workflows/calls/runs", nil, []byte(`{"input":{}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	a = tb.send(t, http.MethodPost, "/v1/workflows/calls/runs", nil, []byte(`{"input":{}}`))
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	require.Equal(t, 1, claim(), "the bucket, full again, holds the manifest's one token")
	require.Equal(t, 0, claim())
	a = tb.sendAs(t, viewerToken, http.MethodGet, "/v1/limits?name=api", nil, nil)
	lim = decode[api.Limits](t, a)
	require.Empty(t, lim.Overrides)
	require.Equal(t, 1, lim.Rates[0].Limit)
	require.Equal(t, "1h0m0s", lim.Rates[0].Per)
}

// rateOf is the rate_limit field of a limit override.
func rateOf(t *testing.T, body []byte) string {
	t.Helper()
	var v struct {
		RateLimit json.RawMessage `json:"rate_limit"`
	}
	require.NoError(t, json.Unmarshal(body, &v), "%s", body)
	return string(v.RateLimit)
}
