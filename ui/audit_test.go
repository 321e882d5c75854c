package ui_test

import (
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
	"github.com/cairnrun/cairn/ui"
)

const auditAdminToken = "admin-token-0123456789abcdef"

// TestAuditPage: a login is audited (uiLogin, in the transaction that starts
// the session); an admin sees the audit log page, with its filters, and the
// header links it; an operator has no link and the page answers the API's 403.
func TestAuditPage(t *testing.T) {
	t.Parallel()
	store := catalog.New(testenv.DB(t), nil)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken + ",admin:root:" + auditAdminToken)
	require.NoError(t, err)
	hs := serveUI(t, store, tokens)

	get := func(c *http.Cookie, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(http.MethodGet, hs.URL+path, nil)
		require.NoError(t, err)
		req.AddCookie(c)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b)
	}

	alice := loginAs(t, hs.URL, operatorToken)
	var rows []struct {
		Actor  string `db:"actor"`
		Role   string `db:"role"`
		Action string `db:"action"`
	}
	require.NoError(t, store.DB().SelectContext(t.Context(), &rows, `SELECT actor, role, action FROM audit_log`))
	require.Len(t, rows, 1)
	require.Equal(t, []string{"alice", "operator", "uiLogin"}, []string{rows[0].Actor, rows[0].Role, rows[0].Action})

	status, body := get(alice, "/ui/runs")
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, `href="/ui/audit"`, "no audit link for an operator")
	status, body = get(alice, "/ui/audit")
	require.Equal(t, http.StatusForbidden, status, "%s", body)

	root := loginAs(t, hs.URL, auditAdminToken)
	status, body = get(root, "/ui/runs")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `href="/ui/audit"`)
	status, body = get(root, "/ui/audit")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, 2, strings.Count(body, `data-action="uiLogin"`), "both logins: %s", body)
	status, body = get(root, "/ui/audit?actor=alice&since=1h")
	require.Equal(t, http.StatusOK, status, "%s", body)
	require.Equal(t, 1, strings.Count(body, `data-action="uiLogin"`))
	status, _ = get(root, "/ui/audit?since=yesterday")
	require.Equal(t, http.StatusBadRequest, status)
}

// TestManagedTokenLogin: a managed token logs in to the UI (with the API server
// as the UI's Identities); once revoked, its session ends within the servers'
// token cache bound, and a new login says why it is refused.
func TestManagedTokenLogin(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := catalog.New(testenv.DB(t), nil)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	srv := api.New(store, blobs, &api.Config{TempDir: t.TempDir()})
	h, err := ui.New(srv.Handler(), nil, store, &ui.Config{Identities: srv})
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)

	const value = "cairn_managed-token-for-the-ui-0123456789abcdef"
	hash := api.TokenHash(value)
	tok, err := store.TokenCreate(ctx, catalog.TokenCreateParams{Name: "carol", Role: "operator", Hash: hash[:], CreatedBy: "root"})
	require.NoError(t, err)

	c := loginAs(t, hs.URL, value)
	status, _ := pageWith(t, hs.URL+"/ui/runs", c)
	require.Equal(t, http.StatusOK, status)

	_, err = store.TokenRevoke(ctx, tok.ID, "root")
	require.NoError(t, err)
	time.Sleep(api.TokenCacheTTL) // the bound under test, not a wait for an event
	status, loc := pageWith(t, hs.URL+"/ui/runs", c)
	require.Equal(t, http.StatusSeeOther, status, "the revoked token's session ended")
	require.True(t, strings.HasPrefix(loc, "/ui/login"), loc)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(hs.URL+"/ui/login", url.Values{"token": {value}, "next": {"/ui/runs"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Contains(t, resp.Header.Get("Location"), "revoked")
}

// loginAs logs in to the UI at base with token and returns the session cookie.
func loginAs(t *testing.T, base, token string) *http.Cookie {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.PostForm(base+"/ui/login", url.Values{"token": {token}, "next": {"/ui/runs"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "/ui/runs", resp.Header.Get("Location"))
	for _, c := range resp.Cookies() {
		if c.Name == "cairn_session" {
			return c
		}
	}
	t.Fatal("no session cookie")
	return nil
}
