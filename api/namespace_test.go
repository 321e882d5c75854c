package api_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNamespaces: the same bundle deployed in default and in acme is a version of
// two workflows; a run started in acme is listed there only, under the name the
// user gave; a token scoped to acme reaches acme's run and not default's (404, as
// a missing run), and may not name another namespace; an unknown namespace is a
// 404 namespace_not_found; secrets and limits of one name are two objects; the
// operations of every namespace refuse a scoped token.
func TestNamespaces(t *testing.T) {
	t.Parallel()
	tb, _ := setupTwoServers(t)
	acme := map[string]string{"Cairn-Namespace": "acme"}

	// Unknown namespace.
	a := tb.sendAs(t, adminToken, http.MethodGet, "/v1/workflows", acme, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Equal(t, "namespace_not_found", a.problem.Code)

	a = tb.sendAs(t, adminToken, http.MethodPost, "/v1/namespaces", nil, []byte(`{"name":"acme"}`))
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPost, "/v1/namespaces", nil, []byte(`{"name":"acme"}`))
	require.Equal(t, http.StatusConflict, a.status, "%s", a.body)

	bundle := archive(t, entry{name: "cairn.yaml", body: "name: hello\nsteps:\n  - {key: greet, builtin: noop}\n"})
	gz := map[string]string{"Content-Type": "application/gzip"}
	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/bundles", gz, bundle)
	require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/bundles", map[string]string{"Content-Type": "application/gzip", "Cairn-Namespace": "acme"}, bundle)
	require.Equal(t, http.StatusCreated, a.status, "the same bundle in another namespace is a new version: %s", a.body)
	require.Equal(t, "hello", decode[map[string]any](t, a)["workflow"])

	start := func(header map[string]string) string {
		a := tb.sendAs(t, operatorToken, http.MethodPost, "/v1/workflows/hello/runs", header, []byte(`{}`))
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		return decode[map[string]any](t, a)["id"].(string)
	}
	inDefault, inAcme := start(nil), start(acme)

	ids := func(token string, header map[string]string) []string {
		a := tb.sendAs(t, token, http.MethodGet, "/v1/runs", header, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		var l struct {
			Items []struct{ ID, Workflow string }
		}
		require.NoError(t, json.Unmarshal(a.body, &l))
		var out []string
		for _, r := range l.Items {
			require.Equal(t, "hello", r.Workflow)
			out = append(out, r.ID)
		}
		return out
	}
	require.Equal(t, []string{inDefault}, ids(viewerToken, nil))
	require.Equal(t, []string{inAcme}, ids(viewerToken, acme))

	scoped := tb.createToken(t, `{"name":"acme-ops","role":"admin","namespace":"acme"}`)
	require.NotNil(t, scoped.Namespace)
	require.Equal(t, []string{inAcme}, ids(scoped.Value, nil), "a scoped token acts in its namespace without a header")
	a = tb.sendAs(t, scoped.Value, http.MethodGet, "/v1/runs/"+inAcme+"/steps", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	missing := tb.sendAs(t, scoped.Value, http.MethodGet, "/v1/runs/0193a6d0-0000-7000-8000-000000000000", nil, nil)
	for _, path := range []string{"/v1/runs/" + inDefault, "/v1/runs/" + inDefault + "/steps", "/v1/runs/" + inDefault + "/events"} {
		a = tb.sendAs(t, scoped.Value, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusNotFound, a.status, "%s: %s", path, a.body)
		require.Equal(t, missing.problem.Code, a.problem.Code, path)
	}
	a = tb.sendAs(t, scoped.Value, http.MethodPost, "/v1/runs/"+inDefault+"/cancel", nil, []byte(`{}`))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.sendAs(t, scoped.Value, http.MethodGet, "/v1/runs", map[string]string{"Cairn-Namespace": "default"}, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Equal(t, "namespace_not_found", a.problem.Code)
	for _, path := range []string{"/v1/tokens", "/v1/audit", "/v1/capacity"} {
		a = tb.sendAs(t, scoped.Value, http.MethodGet, path, nil, nil)
		require.Equal(t, http.StatusForbidden, a.status, "%s: %s", path, a.body)
	}

	// Limits of one name in two namespaces.
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/limits/db", nil, []byte(`{"concurrency":2}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.sendAs(t, scoped.Value, http.MethodPut, "/v1/limits/db", nil, []byte(`{"concurrency":7}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	limits := func(header map[string]string) []any {
		a := tb.sendAs(t, adminToken, http.MethodGet, "/v1/limits", header, nil)
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		return decode[map[string]any](t, a)["overrides"].([]any)
	}
	require.Len(t, limits(nil), 1)
	require.EqualValues(t, 2, limits(nil)[0].(map[string]any)["concurrency"])
	require.Len(t, limits(acme), 1)
	require.EqualValues(t, 7, limits(acme)[0].(map[string]any)["concurrency"])
	require.Equal(t, "db", limits(acme)[0].(map[string]any)["name"])

	// Events: the same id in two namespaces is two events.
	for _, h := range []map[string]string{nil, acme} {
		a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/events", h, []byte(`{"name":"order.paid","id":"e-1","data":{}}`))
		require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
		ans := decode[map[string]any](t, a)
		require.Equal(t, false, ans["duplicate"])
		require.Equal(t, "e-1", ans["event_id"])
		require.Equal(t, "order.paid", ans["name"])
	}
	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/events", nil, []byte(`{"name":"order.paid","id":"acme/e-1","data":{}}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "an id of default may not name another namespace's event: %s", a.body)
	a = tb.sendAs(t, viewerToken, http.MethodGet, "/v1/events/acme%2Fe-1", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.sendAs(t, scoped.Value, http.MethodGet, "/v1/events/e-1", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
}
