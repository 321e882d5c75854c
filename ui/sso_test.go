package ui_test

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/internal/testenv/oidcprovider"
	"github.com/cairnrun/cairn/ui"
)

const ssoSecret = "cairn-ui-secret-0123456789"

// serveSSO serves the UI with single sign-on through provider p, whose client
// "cairn-ui" it registers, with secret; on store.
func serveSSO(t *testing.T, p *oidcprovider.Provider, store *catalog.Store, secret string) *httptest.Server {
	t.Helper()
	hs := httptest.NewUnstartedServer(nil)
	redirect := "http://" + hs.Listener.Addr().String() + "/ui/sso/callback"
	p.SetClient(oidcprovider.WebClient{ID: "cairn-ui", Secret: secret, RedirectURIs: []string{redirect}})
	roles, err := api.ParseRoleMap("groups:acme-dev=operator")
	require.NoError(t, err)
	blobs, err := blobstore.NewFile(t.TempDir(), nil)
	require.NoError(t, err)
	tokens := &api.Tokens{}
	h, err := ui.New(api.New(store, blobs, &api.Config{Tokens: tokens, TempDir: t.TempDir()}).Handler(), tokens, store,
		&ui.Config{SSO: &ui.SSOConfig{Issuer: p.Issuer, ClientID: "cairn-ui", ClientSecret: secret, RedirectURL: redirect, Roles: roles}})
	require.NoError(t, err)
	hs.Config.Handler = h
	hs.Start()
	t.Cleanup(hs.Close)
	return hs
}

// ssoSignIn follows "Sign in with SSO" from start (a URL of /ui/sso/start) as a
// browser would, signing in at the provider as user; it returns the final
// answer's status and body.
func ssoSignIn(t *testing.T, c *http.Client, p *oidcprovider.Provider, start, user, password string) (int, string) {
	t.Helper()
	resp, err := c.Get(start)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	login := resp.Request.URL // the provider's login form
	require.True(t, strings.HasPrefix(login.String(), p.Issuer+"/login"), login.String())
	resp, err = c.PostForm(p.Issuer+"/login", url.Values{"authRequestID": {login.Query().Get("authRequestID")}, "username": {user}, "password": {password}})
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func newBrowserClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar}
}

// TestSSOSession signs in through a real OpenID provider: the session lasts
// across requests and acts with the mapped role; a session row whose role was
// raised in the database, or that a server with another client secret (or
// without SSO) reads, opens nothing; a callback whose state does not match the
// flow's cookie is refused, the provider's own refusal is shown, and the page
// asked for stays inside the UI.
func TestSSOSession(t *testing.T) {
	t.Parallel()
	p := oidcprovider.Start(t, oidcprovider.Config{Users: []oidcprovider.User{
		{ID: "u1", Username: "dana", Password: "pw", Email: "dana@example.com", Claims: map[string]any{"groups": []string{"acme-dev"}}},
	}})
	db := testenv.DB(t)
	store := catalog.New(db, nil)
	hs := serveSSO(t, p, store, ssoSecret)
	c := newBrowserClient(t)

	status, body := ssoSignIn(t, c, p, hs.URL+"/ui/sso/start?next="+url.QueryEscape("//evil.example/x"), "dana", "pw")
	require.Equal(t, http.StatusOK, status, body)
	require.Contains(t, body, `url=/ui/runs`, "an outside page is not a place to go on to")
	page := func(c *http.Client, base string) string {
		resp, err := c.Get(base + "/ui/runs")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.Request.URL.Path + "\n" + string(b)
	}
	require.Contains(t, page(c, hs.URL), "dana@example.com (operator)")

	// Another server with the same secret reads the same session.
	other := serveSSO(t, p, store, ssoSecret)
	jarURL, _ := url.Parse(hs.URL + "/ui/")
	otherURL, _ := url.Parse(other.URL + "/ui/")
	c.Jar.SetCookies(otherURL, c.Jar.Cookies(jarURL))
	require.Contains(t, page(c, other.URL), "dana@example.com (operator)")

	// With another secret the session opens nothing; so too on a server without SSO.
	rotated := serveSSO(t, p, store, "another-secret-0123456789")
	rotatedURL, _ := url.Parse(rotated.URL + "/ui/")
	c.Jar.SetCookies(rotatedURL, c.Jar.Cookies(jarURL))
	require.True(t, strings.HasPrefix(page(c, rotated.URL), "/ui/login\n"))
	plain := serveUI(t, store, &api.Tokens{})
	plainURL, _ := url.Parse(plain.URL + "/ui/")
	c.Jar.SetCookies(plainURL, c.Jar.Cookies(jarURL))
	require.True(t, strings.HasPrefix(page(c, plain.URL), "/ui/login\n"))

	// A role raised in the session's row does not take: the row no longer
	// matches its mark.
	_, err := db.ExecContext(t.Context(), `UPDATE ui_sessions SET role = 'admin'`)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(page(c, hs.URL), "/ui/login\n"))

	// A callback whose state is not the flow's is refused, before any code is
	// exchanged.
	noFollow := newBrowserClient(t)
	noFollow.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := noFollow.Get(hs.URL + "/ui/sso/start")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusFound, resp.StatusCode)
	resp, err = noFollow.Get(hs.URL + "/ui/sso/callback?code=x&state=not-the-state")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(b), "state does not match")
	// The provider's own refusal, with the flow's state, is shown as such.
	resp, err = noFollow.Get(hs.URL + "/ui/sso/start")
	require.NoError(t, err)
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	resp, err = noFollow.Get(hs.URL + "/ui/sso/callback?" + url.Values{"state": {loc.Query().Get("state")}, "error": {"access_denied"}, "error_description": {"not allowed"}}.Encode())
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.Contains(t, string(b), "The identity provider refused the sign-in: access_denied (not allowed)")
	// And one without the flow's cookie.
	resp, err = http.Get(hs.URL + "/ui/sso/callback?code=x&state=y")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}
