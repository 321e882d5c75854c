package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
)

const viewerToken = "viewer-token-0123456789"

// setupWithViewer is setup with a viewer's token besides the operator's.
func setupWithViewer(t *testing.T) *testBundle {
	t.Helper()
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens, err := api.ParseTokens("operator:" + operatorToken + ",viewer:" + viewerToken)
	require.NoError(t, err)
	hs := httptest.NewServer(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler())
	t.Cleanup(hs.Close)
	return &testBundle{store: store, url: hs.URL}
}

type listedRun struct {
	ID       string            `json:"id"`
	Status   string            `json:"status"`
	Labels   map[string]string `json:"labels"`
	ParentID *string           `json:"parent_id"`
}

// startLabeled starts a run of hello with the labels and returns it.
func (tb *testBundle) startLabeled(t *testing.T, labels map[string]string) listedRun {
	t.Helper()
	body, err := json.Marshal(map[string]any{"labels": labels})
	require.NoError(t, err)
	a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, body)
	require.Equal(t, http.StatusAccepted, a.status, "%s", a.body)
	var run listedRun
	require.NoError(t, json.Unmarshal(a.body, &run))
	return run
}

func (tb *testBundle) deployHelloOnly(t *testing.T) {
	t.Helper()
	status, out := tb.upload(t, bytes.NewReader(archive(t, entry{name: "cairn.yaml", body: "name: hello\nsteps:\n  - {key: greet, builtin: noop}\n"})))
	require.Equal(t, http.StatusCreated, status, "%v", out)
}

// TestStartRunLabels: labels given at start come back in the run, from get and
// list; a run without labels has {}; the labels are part of the idempotent request.
func TestStartRunLabels(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deployHelloOnly(t)

	run := tb.startLabeled(t, map[string]string{"tenant": "acme", "batch": "2025-03-01"})
	require.Equal(t, map[string]string{"tenant": "acme", "batch": "2025-03-01"}, run.Labels)
	a := tb.send(t, http.MethodGet, "/v1/runs/"+run.ID, nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	var got listedRun
	require.NoError(t, json.Unmarshal(a.body, &got))
	require.Equal(t, run.Labels, got.Labels)
	require.Nil(t, got.ParentID)

	a = tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{}`))
	require.Equal(t, http.StatusAccepted, a.status)
	require.Contains(t, string(a.body), `"labels":{}`, "labels is always an object")

	// Idempotency: the same labels are the same request, other labels another one.
	key := map[string]string{"Idempotency-Key": "k1"}
	first := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", key, []byte(`{"labels":{"a":"1","b":"2"}}`))
	require.Equal(t, http.StatusAccepted, first.status)
	again := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", key, []byte(`{"labels":{"b":"2","a":"1"}}`))
	require.Equal(t, http.StatusAccepted, again.status)
	require.JSONEq(t, string(first.body), string(again.body))
	other := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", key, []byte(`{"labels":{"a":"1","b":"3"}}`))
	require.Equal(t, http.StatusConflict, other.status)
	require.Equal(t, "idempotency_key_reused", other.problem.Code)
}

// TestStartRunBadLabels: a label breaking a rule is a 422 naming it; no run is made.
func TestStartRunBadLabels(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	tb.deployHelloOnly(t)
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	manyJSON, err := json.Marshal(many)
	require.NoError(t, err)
	for _, tc := range []struct {
		name, labels, location string
	}{
		{name: "33 labels", labels: string(manyJSON), location: "body.labels"},
		{name: "upper-case key", labels: `{"Tenant": "acme"}`, location: "body.labels.Tenant"},
		{name: "key with a dot", labels: `{"ok": "1", "a.b": "acme"}`, location: "body.labels.a.b"},
		{name: "key too long", labels: `{"` + strings.Repeat("k", 64) + `": "v"}`, location: "body.labels." + strings.Repeat("k", 64)},
		{name: "value too long", labels: `{"k": "` + strings.Repeat("v", 257) + `"}`, location: "body.labels.k"},
		{name: "value with NUL", labels: `{"k": "a\u0000b"}`, location: "body.labels.k"},
		{name: "value not a string", labels: `{"k": 1}`, location: "body.labels.k"},
		{name: "not an object", labels: `["k"]`, location: "body.labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tb.send(t, http.MethodPost, "/v1/workflows/hello/runs", nil, []byte(`{"labels": `+tc.labels+`}`))
			require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
			require.Equal(t, "validation_failed", a.problem.Code)
			require.Contains(t, a.locations(), tc.location, "%s", a.body)
		})
	}
	a := tb.send(t, http.MethodGet, "/v1/runs", nil, nil)
	require.Equal(t, http.StatusOK, a.status)
	require.Contains(t, string(a.body), `"items":[]`, "no run was made")
}

// TestListRunsFilters: GET /v1/runs with a label and a status filter pages through
// exactly the matching runs; a viewer may list; a cursor works only with the
// filters it was issued for.
func TestListRunsFilters(t *testing.T) {
	t.Parallel()
	tb := setupWithViewer(t)
	tb.deployHelloOnly(t)
	ctx := t.Context()

	var want []string // acme's failed runs, newest first
	for i := range 12 {
		tenant := []string{"acme", "globex"}[i%2]
		run := tb.startLabeled(t, map[string]string{"tenant": tenant, "n": fmt.Sprint(i)})
		if i%3 != 2 {
			_, err := tb.store.DB().ExecContext(ctx, `UPDATE runs SET status = 'failed', finished_at = now(),
  error = '{"message": "step greet failed", "step": "greet", "cause": {"message": "boom", "code": "boom"}}' WHERE id = $1`, run.ID)
			require.NoError(t, err)
			if tenant == "acme" {
				want = append([]string{run.ID}, want...)
			}
		}
	}
	require.Len(t, want, 4)

	list := func(token, query string) (*answer, []listedRun, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, tb.url+"/v1/runs?"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		a := &answer{status: resp.StatusCode}
		a.body, err = io.ReadAll(resp.Body)
		require.NoError(t, err)
		var page struct {
			Items      []listedRun `json:"items"`
			NextCursor string      `json:"next_cursor"`
		}
		if a.status == http.StatusOK {
			require.NoError(t, json.Unmarshal(a.body, &page))
		} else {
			require.NoError(t, json.Unmarshal(a.body, &a.problem))
		}
		return a, page.Items, page.NextCursor
	}

	filter := "label=tenant%3Dacme&status=failed&error_code=boom&workflow=hello&version=1&created_after=" +
		url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)) + "&created_before=" +
		url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339Nano))
	var got []string
	var cursor, lastCursor string
	for page := 0; ; page++ {
		require.Less(t, page, 10)
		a, items, next := list(viewerToken, filter+"&limit=1&cursor="+url.QueryEscape(cursor))
		require.Equal(t, http.StatusOK, a.status, "%s", a.body)
		for _, r := range items {
			require.Equal(t, "acme", r.Labels["tenant"])
			require.Equal(t, "failed", r.Status)
			got = append(got, r.ID)
		}
		if next == "" {
			break
		}
		cursor, lastCursor = next, next
	}
	require.Equal(t, want, got)

	// Two labels must both match; a label nobody carries matches nothing.
	a, items, _ := list(viewerToken, "label=tenant=acme&label=n=0")
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
	require.Len(t, items, 1)
	require.Equal(t, map[string]string{"tenant": "acme", "n": "0"}, items[0].Labels)
	a, items, _ = list(viewerToken, "label=tenant=hooli")
	require.Equal(t, http.StatusOK, a.status)
	require.Empty(t, items)

	// The cursor is bound to every filter: with another label, status, code or
	// time, it is refused.
	for _, other := range []string{
		strings.Replace(filter, "acme", "globex", 1),
		strings.Replace(filter, "status=failed", "status=succeeded", 1),
		strings.Replace(filter, "error_code=boom", "error_code=bang", 1),
		strings.Replace(filter, "&version=1", "", 1),
		filter + "&label=n=1",
		filter[:strings.Index(filter, "&created_before")],
	} {
		a, _, _ := list(viewerToken, other+"&limit=1&cursor="+url.QueryEscape(lastCursor))
		require.Equal(t, http.StatusBadRequest, a.status, "%s: %s", other, a.body)
		require.Equal(t, "invalid_cursor", a.problem.Code)
	}
	// The same filters in another order are the same filters.
	a, _, _ = list(viewerToken, "status=failed&"+filter+"&limit=1&cursor="+url.QueryEscape(lastCursor))
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
}

// TestListRunsBadFilters: a bad filter value is a 422 naming the parameter.
func TestListRunsBadFilters(t *testing.T) {
	t.Parallel()
	tb := setup(t)
	var many []string
	for i := range 33 {
		many = append(many, fmt.Sprintf("label=k%d=v", i))
	}
	for _, tc := range []struct {
		name, query, location string
	}{
		{name: "label without =", query: "label=tenant", location: "query.label[0]"},
		{name: "bad label key", query: "label=env=prod&label=Tenant=acme", location: "query.label[1]"},
		{name: "label value too long", query: "label=k=" + strings.Repeat("v", 257), location: "query.label[0]"},
		{name: "label value with NUL", query: "label=k=a%00b", location: "query.label[0]"},
		{name: "one label, two values", query: "label=k=a&label=k=b", location: "query.label[1]"},
		{name: "33 labels", query: strings.Join(many, "&"), location: "query.label"},
		{name: "version without workflow", query: "version=2", location: "query.version"},
		{name: "version not a number", query: "workflow=hello&version=two", location: "query.version"},
		{name: "negative version", query: "workflow=hello&version=-1", location: "query.version"},
		{name: "created_after not RFC 3339", query: "created_after=yesterday", location: "query.created_after"},
		{name: "created_before not RFC 3339", query: "created_before=2025-03-01", location: "query.created_before"},
		{name: "parent not a UUID", query: "parent=42", location: "query.parent"},
		{name: "error_code too long", query: "error_code=" + strings.Repeat("e", 257), location: "query.error_code"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := tb.send(t, http.MethodGet, "/v1/runs?"+tc.query, nil, nil)
			require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
			require.Equal(t, "validation_failed", a.problem.Code)
			require.Contains(t, a.locations(), tc.location, "%s", a.body)
		})
	}
	// A label value may hold '=' and any UTF-8; a parent that started nothing
	// matches nothing.
	a := tb.send(t, http.MethodGet, "/v1/runs?label=expr=a%3Db%3Dc&label=city=Z%C3%BCrich&parent=0195516a-0000-7000-8000-000000000000", nil, nil)
	require.Equal(t, http.StatusOK, a.status, "%s", a.body)
}
