package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
)

// TestNamespaceQuotas: an admin reads and sets a namespace's quotas (null clears
// one, a field left out keeps its own), audited in the write's transaction; an
// unknown namespace is a 404 not_found, a quota on default a 422; a run over the
// runs_per_minute quota is a 429 quota_exceeded whose detail names the quota and
// the namespace, with Retry-After, and nothing is created.
func TestNamespaceQuotas(t *testing.T) {
	t.Parallel()
	tb := setupWith(t, api.Config{})
	ctx := context.Background()
	_, err := tb.store.DB().ExecContext(ctx, `INSERT INTO namespaces (name, created_by, updated_by) VALUES ('a', 'test', 'test')`)
	require.NoError(t, err)

	a := tb.sendAs(t, adminToken, http.MethodGet, "/v1/namespaces/nope/quotas", nil, nil)
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	require.Equal(t, "not_found", a.problem.Code)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/namespaces/nope/quotas", nil, []byte(`{"running_steps":3}`))
	require.Equal(t, http.StatusNotFound, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/namespaces/default/quotas", nil, []byte(`{"running_steps":3}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/namespaces/a/quotas", nil, []byte(`{}`))
	require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
	a = tb.sendAs(t, operatorToken, http.MethodPut, "/v1/namespaces/a/quotas", nil, []byte(`{"running_steps":3}`))
	require.Equal(t, http.StatusForbidden, a.status, "%s", a.body)

	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/namespaces/a/quotas", nil, []byte(`{"running_steps":3,"runs_per_minute":2}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	var q api.NamespaceQuotas
	require.NoError(t, json.Unmarshal(a.body, &q))
	require.Equal(t, 3, *q.RunningSteps)
	require.Equal(t, 2, *q.RunsPerMinute)
	a = tb.sendAs(t, adminToken, http.MethodPut, "/v1/namespaces/a/quotas", nil, []byte(`{"running_steps":null}`))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	a = tb.sendAs(t, adminToken, http.MethodGet, "/v1/namespaces/a/quotas", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	q = api.NamespaceQuotas{}
	require.NoError(t, json.Unmarshal(a.body, &q))
	require.Nil(t, q.RunningSteps)
	require.Equal(t, 2, *q.RunsPerMinute)

	audit, err := tb.store.AuditList(ctx, catalog.AuditListParams{Action: "putNamespaceQuotas", Limit: 10})
	require.NoError(t, err)
	outcomes := map[string]int{}
	for _, r := range audit {
		outcomes[r.Outcome+" "+r.Target]++
	}
	require.Equal(t, map[string]int{"ok namespace=a": 2, "failed namespace=a": 1, "failed namespace=nope": 1,
		"failed namespace=default": 1}, outcomes)

	// Two runs of a in the minute, then a rerun (a new run of a) is refused.
	v := catalogtest.Version(t, tb.store, "a/wf", catalog.NewStep{Key: "s", MaxAttempts: 1})
	for range 2 {
		_, _, err := tb.store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "a/wf", Version: v.Version})
		require.NoError(t, err)
	}
	var src string
	require.NoError(t, tb.store.DB().GetContext(ctx, &src,
		`UPDATE runs SET status = 'failed', finished_at = now() WHERE id = (SELECT id FROM runs ORDER BY id LIMIT 1) RETURNING id`))
	a = tb.sendAs(t, operatorToken, http.MethodPost, "/v1/runs/"+src+"/rerun", nil, []byte(`{"from_step":"s"}`))
	require.Equal(t, http.StatusTooManyRequests, a.status, "%s", a.body)
	require.Equal(t, "quota_exceeded", a.problem.Code)
	require.Contains(t, a.problem.Detail, "namespace a")
	require.Contains(t, a.problem.Detail, "runs_per_minute")
	secs, err := strconv.Atoi(a.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", a.header.Get("Retry-After"))
	require.True(t, secs >= 1 && secs <= 60, "Retry-After %d", secs)
	var n int
	require.NoError(t, tb.store.DB().GetContext(ctx, &n, `SELECT count(*) FROM runs`))
	require.Equal(t, 2, n, "nothing was created")
}
