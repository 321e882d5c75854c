package main

import (
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cairnrun/cairn/internal/testenv"
	"github.com/cairnrun/cairn/internal/testenv/oidcprovider"
)

// ssoAdminToken creates the namespace a role of TestSSOInBrowser is scoped to.
const ssoAdminToken = "admin-token-for-sso-tests-0123456789"

// TestSSOInBrowser signs in to the web UI of a real `cairn serve` through "Sign
// in with SSO" in Chromium, against a real OpenID provider the test runs
// (internal/testenv/oidcprovider): the user types their password at the
// provider, and lands on the page they asked for with the role their groups map
// to (in its namespace, for a role scoped to one); a user whose groups map to no role gets a 403 page that says which claim
// was looked at. One server, one browser, a few page loads each.
func TestSSOInBrowser(t *testing.T) {
	t.Parallel()
	chromium := chromiumPath(t)
	// The provider on another site (localhost) than the server (127.0.0.1).
	p := oidcprovider.Start(t, oidcprovider.Config{Host: "localhost", Users: []oidcprovider.User{
		{ID: "u1", Username: "alice", Password: "alice-pw", Email: "alice@example.com", Claims: map[string]any{"groups": []string{"everyone", "platform"}}},
		{ID: "u2", Username: "dana", Password: "dana-pw", Email: "dana@example.com", Claims: map[string]any{"groups": []string{"acme-dev"}}},
		{ID: "u4", Username: "sam", Password: "sam-pw", Email: "sam@example.com", Claims: map[string]any{"groups": []string{"acme-ops"}}},
		{ID: "u3", Username: "mallory", Password: "mallory-pw", Email: "mallory@example.com", Claims: map[string]any{"groups": []string{"marketing"}}},
	}})
	addr := freeAddr(t)
	const clientID, secret = "cairn-ui", "cairn-ui-secret-0123456789"
	p.SetClient(oidcprovider.WebClient{ID: clientID, Secret: secret, RedirectURIs: []string{"http://" + addr + "/ui/sso/callback"}})
	server := startServeAt(t, addr,
		"CAIRN_DATABASE_URL="+testenv.DatabaseURL(t),
		"CAIRN_BLOBSTORE=file://"+t.TempDir(),
		"CAIRN_TOKENS=operator:"+operatorTokenForTest+",admin:"+ssoAdminToken,
		"CAIRN_PUBLIC_URL=http://"+addr,
		"CAIRN_OIDC_ISSUER="+p.Issuer,
		"CAIRN_OIDC_CLIENT_ID="+clientID,
		"CAIRN_OIDC_CLIENT_SECRET="+secret,
		"CAIRN_OIDC_ROLE_MAP=groups:platform=admin@*,groups:acme-dev=operator,groups:acme-ops=operator@acme",
	)
	req, err := http.NewRequest(http.MethodPost, server+"/v1/namespaces", strings.NewReader(`{"name":"acme"}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ssoAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	e := &browserEnv{server: server, browser: startChromium(t, chromium)}

	// signIn opens the runs list logged out, follows "Sign in with SSO" and signs
	// in at the provider; it returns the tab and the HTTP status of the page the
	// sign-in ends on.
	signIn := func(t *testing.T, user, password string) (*browserTab, int) {
		b := e.tab(t)
		b.do(chromedp.Navigate(server+"/ui/runs?status=failed"), chromedp.WaitVisible(chromedp.ID("sso")))
		require.Contains(t, b.location(), "/ui/login?next=")
		b.submit(chromedp.Click(chromedp.ID("sso")))
		b.do(chromedp.WaitVisible(chromedp.ID("provider-username")))
		require.True(t, strings.HasPrefix(b.location(), p.Issuer+"/login"), "at the provider: %s", b.location())
		status := b.submit(chromedp.SendKeys(chromedp.ID("provider-username"), user),
			chromedp.SendKeys(chromedp.ID("provider-password"), password), chromedp.Click(chromedp.ID("provider-login")))
		return b, status
	}

	t.Run("admin", func(t *testing.T) {
		b, status := signIn(t, "alice", "alice-pw")
		require.Equal(t, 200, status)
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.Equal(t, "alice@example.com (admin)", b.text("#who"))
		require.Contains(t, b.location(), "/ui/runs?status=failed", "back on the page asked for")
		// The session lives on: another page, no sign-in.
		b.do(chromedp.Navigate(server+"/ui/limits"), chromedp.WaitVisible(chromedp.ID("who")))
		require.Equal(t, "alice@example.com (admin)", b.text("#who"))
	})

	t.Run("operator", func(t *testing.T) {
		b, _ := signIn(t, "dana", "dana-pw")
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.Equal(t, "dana@example.com (operator)", b.text("#who"))
	})

	t.Run("scoped to a namespace", func(t *testing.T) {
		b, _ := signIn(t, "sam", "sam-pw")
		b.do(chromedp.WaitVisible(chromedp.ID("runs")))
		require.Equal(t, "sam@example.com (operator, namespace acme)", b.text("#who"))
	})

	t.Run("unmapped", func(t *testing.T) {
		b, status := signIn(t, "mallory", "mallory-pw")
		require.Equal(t, 403, status)
		b.do(chromedp.WaitVisible(chromedp.ID("message")))
		msg := b.text("#message")
		require.Contains(t, msg, "You signed in as mallory@example.com, but Cairn gives you no role")
		require.Contains(t, msg, `the claim "groups" (the token has: marketing)`)
		b.shoot("sso-refused.png")
		body := b.text("body")
		require.NotContains(t, body, "eyJ", "no token on the page")
		require.Zero(t, b.eval(`document.querySelectorAll("#who").length`), "no one is logged in")
		b.do(chromedp.Navigate(server+"/ui/runs"), chromedp.WaitVisible(chromedp.ID("sso")))
	})
}
