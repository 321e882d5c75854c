package ui_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/catalog/catalogtest"
	"github.com/cairnrun/cairn/internal/testenv"
)

// TestNamespaceChoice: a session of every namespace shows default's runs, and
// offers the namespaces in the header once there is another; choosing acme shows
// acme's runs and not default's, and acme's workflow by its name. A
// Cairn with default alone shows no choice.
func TestNamespaceChoice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := catalog.New(testenv.DB(t), nil)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken)
	require.NoError(t, err)
	hs := serveUI(t, store, tokens)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(hs.URL+"/ui/login", url.Values{"token": {operatorToken}, "next": {"/ui/runs"}})
	require.NoError(t, err)
	resp.Body.Close()
	var session *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "cairn_session" {
			session = c
		}
	}
	require.NotNil(t, session)
	get := func(path string, cookies ...*http.Cookie) (int, string) {
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		for _, c := range append([]*http.Cookie{session}, cookies...) {
			req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		}
		resp, err := noRedirect.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	catalogtest.Version(t, store, "hello", catalog.NewStep{Key: "a", MaxAttempts: 1})
	catalogtest.Version(t, store, "acme/hello", catalog.NewStep{Key: "a", MaxAttempts: 1})
	inDefault, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "hello", Version: 1})
	require.NoError(t, err)
	inAcme, _, err := store.RunCreate(ctx, &catalog.RunCreateParams{Workflow: "acme/hello", Version: 1})
	require.NoError(t, err)

	status, page := get("/ui/runs")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, inDefault.ID.String()[24:])
	require.NotContains(t, page, inAcme.ID.String()[24:])
	require.NotContains(t, page, `action="/ui/namespace"`, "default alone: nothing to choose")

	_, err = store.NamespaceCreate(ctx, "acme", "test")
	require.NoError(t, err)
	_, page = get("/ui/runs")
	require.Contains(t, page, `action="/ui/namespace"`)
	require.Contains(t, page, "<option>acme</option>")

	csrf := csrfOf(t, hs.URL, session)
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/ui/namespace", strings.NewReader(url.Values{"csrf": {csrf}, "namespace": {"acme"}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: session.Name, Value: session.Value})
	resp, err = noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	var chosen *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "cairn_ns" {
			chosen = c
		}
	}
	require.NotNil(t, chosen)

	status, page = get("/ui/runs", chosen)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, page, inAcme.ID.String()[24:])
	require.NotContains(t, page, inDefault.ID.String()[24:])
	require.Contains(t, page, "<option selected>acme</option>")
	status, page = get("/ui/workflows/hello", chosen)
	require.Equal(t, http.StatusOK, status, "%s", page)
}
