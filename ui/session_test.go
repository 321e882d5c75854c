package ui_test

import (
	"crypto/sha256"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/ui"
)

const operatorToken = "operator-token-0123456789abcdef"

// serveUI serves the UI (and the API it calls) with tokens, on store.
func serveUI(t *testing.T, store *catalog.Store, tokens *api.Tokens) *httptest.Server {
	t.Helper()
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	h, err := ui.New(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler(), tokens, store, nil)
	require.NoError(t, err)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	return hs
}

// TestSessionCookieHoldsNoToken: the session cookie held the raw API
// token (`cairn_session=<token>`). It holds a random session ID; the catalog keeps
// its hash and the token's, never either value. The session ends at logout (the
// cookie's value, wherever it was copied, opens nothing), at its expiry, and when
// the server no longer has its token.
func TestSessionCookieHoldsNoToken(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	store := catalog.New(testenv.DB(t), nil)
	tokens, err := api.ParseTokens("operator:alice:" + operatorToken + ",viewer:" + viewerToken)
	require.NoError(t, err)
	hs := serveUI(t, store, tokens)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(token string) *http.Cookie {
		t.Helper()
		resp, err := noRedirect.PostForm(hs.URL+"/ui/login", url.Values{"token": {token}, "next": {"/ui/runs"}})
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/ui/runs", resp.Header.Get("Location"))
		for _, c := range resp.Cookies() {
			if c.Name == "cairn_session" {
				return c
			}
		}
		t.Fatalf("no session cookie in %v", resp.Header.Values("Set-Cookie"))
		return nil
	}
	page := func(c *http.Cookie, path string) (int, string) {
		t.Helper()
		return pageWith(t, hs.URL+path, c)
	}

	c := login(operatorToken)
	require.NotContains(t, c.Value, operatorToken, "the cookie holds the token")
	require.NotContains(t, operatorToken, c.Value)
	require.GreaterOrEqual(t, len(c.Value), 22, "at least 128 random bits")
	require.True(t, c.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, c.SameSite)
	require.Equal(t, "/ui", c.Path)
	require.Positive(t, c.MaxAge, "the cookie ends with the session")
	status, _ := page(c, "/ui/runs")
	require.Equal(t, http.StatusOK, status, "the session opens the UI")

	sessions, err := store.SessionList(ctx)
	require.NoError(t, err)
	require.Len(t, sessions, 1)
	idHash, tokenHash := sha256.Sum256([]byte(c.Value)), sha256.Sum256([]byte(operatorToken))
	require.Equal(t, idHash[:], sessions[0].IDHash)
	require.Equal(t, tokenHash[:], sessions[0].TokenHash)
	require.Equal(t, "alice", sessions[0].Name)
	require.Equal(t, "operator", sessions[0].Role)
	var stored int
	require.NoError(t, store.DB().GetContext(ctx, &stored, `SELECT count(*) FROM ui_sessions
WHERE position(convert_to($1, 'UTF8') in id_hash || token_hash) > 0 OR position(convert_to($2, 'UTF8') in id_hash || token_hash) > 0`,
		c.Value, operatorToken))
	require.Zero(t, stored, "the catalog holds neither the session ID nor the token")

	// Logout ends the session: the same cookie value, sent again, opens nothing.
	csrf := csrfOf(t, hs.URL, c)
	req, err := http.NewRequest(http.MethodPost, hs.URL+"/ui/logout", strings.NewReader(url.Values{"csrf": {csrf}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(c)
	resp, err := noRedirect.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	status, loc := page(c, "/ui/runs")
	require.Equal(t, http.StatusSeeOther, status, "a logged-out session opens nothing")
	require.True(t, strings.HasPrefix(loc, "/ui/login"), loc)
	sessions, err = store.SessionList(ctx)
	require.NoError(t, err)
	require.Empty(t, sessions)

	// Expired: the session is refused (and a login clears it from the table).
	c = login(viewerToken)
	_, err = store.DB().ExecContext(ctx, `UPDATE ui_sessions SET expires_at = now() - interval '1 second'`)
	require.NoError(t, err)
	status, _ = page(c, "/ui/runs")
	require.Equal(t, http.StatusSeeOther, status, "an expired session opens nothing")
	c = login(viewerToken)
	var rows int
	require.NoError(t, store.DB().GetContext(ctx, &rows, `SELECT count(*) FROM ui_sessions`))
	require.Equal(t, 1, rows, "the expired session was deleted by the next login")

	// A server that no longer has the token ends its sessions.
	status, _ = page(c, "/ui/runs")
	require.Equal(t, http.StatusOK, status)
	others, err := api.ParseTokens("operator:" + operatorToken)
	require.NoError(t, err)
	status, _ = pageWith(t, serveUI(t, store, others).URL+"/ui/runs", c)
	require.Equal(t, http.StatusSeeOther, status, "the token is gone: so is its session")
}

// pageWith GETs u with the session cookie c: 200, or a 303 to the login page (not
// followed) and its Location.
func pageWith(t *testing.T, u string, c *http.Cookie) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Location")
}

// csrfOf reads the CSRF token of the session c from a page's meta tag.
func csrfOf(t *testing.T, base string, c *http.Cookie) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+"/ui/runs", nil)
	require.NoError(t, err)
	req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var sb strings.Builder
	_, err = io.Copy(&sb, resp.Body)
	require.NoError(t, err)
	_, rest, ok := strings.Cut(sb.String(), `<meta name="csrf-token" content="`)
	require.True(t, ok, "no CSRF token in the page")
	token, _, _ := strings.Cut(rest, `"`)
	return token
}
