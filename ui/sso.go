package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/zitadel/oidc/v3/pkg/client/rp"
	httphelper "github.com/zitadel/oidc/v3/pkg/http"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"golang.org/x/oauth2"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
)

// SSOConfig turns on "Sign in with SSO" (docs/security.md, "Single sign-on"): the
// OpenID Connect authorization code flow with PKCE, state and nonce, after which
// the user's claims map to a role and a session starts as after a token login.
type SSOConfig struct {
	// Issuer is the provider's issuer URL (CAIRN_OIDC_ISSUER). Required.
	Issuer string
	// ClientID and ClientSecret are Cairn's client at the provider
	// (CAIRN_OIDC_CLIENT_ID, CAIRN_OIDC_CLIENT_SECRET). Required. The secret also
	// keys the flow's cookie and marks SSO sessions: every server of a deployment
	// needs the same one.
	ClientID     string
	ClientSecret string
	// RedirectURL is where the provider sends the browser back:
	// <public URL>/ui/sso/callback, registered at the provider. Required.
	RedirectURL string
	// Scopes asked for; default openid, profile and email.
	Scopes []string
	// Roles maps the user's claims to a role (CAIRN_OIDC_ROLE_MAP). Required.
	Roles *api.RoleMap
	// HTTPClient talks to the provider; default a client with a 10 s timeout.
	HTTPClient *http.Client
}

// ssoCallbackPath is the redirect URL's path.
const ssoCallbackPath = "/ui/sso/callback"

// ssoFlowCookie carries the flow's state, nonce, PKCE verifier and next page
// from /ui/sso/start to the callback, encrypted and authenticated.
const ssoFlowCookie = "cairn_sso"

// sso is the UI's single sign-on, once configured.
type sso struct {
	cfg     SSOConfig
	cookies *httphelper.CookieHandler
	markKey []byte

	mu        sync.Mutex
	party     rp.RelyingParty // nil until discovery succeeded
	lastTried time.Time
}

// CheckSSOConfig reports what is missing or wrong in cfg.
func CheckSSOConfig(cfg *SSOConfig) error {
	var missing []string
	for _, f := range []struct{ name, val string }{
		{"CAIRN_OIDC_ISSUER", cfg.Issuer}, {"CAIRN_OIDC_CLIENT_ID", cfg.ClientID},
		{"CAIRN_OIDC_CLIENT_SECRET", cfg.ClientSecret}, {"the redirect URL", cfg.RedirectURL},
	} {
		if f.val == "" {
			missing = append(missing, f.name)
		}
	}
	if cfg.Roles == nil || cfg.Roles.Len() == 0 {
		missing = append(missing, "CAIRN_OIDC_ROLE_MAP")
	}
	if len(missing) > 0 {
		return fmt.Errorf("single sign-on needs %s", strings.Join(missing, ", "))
	}
	u, err := url.Parse(cfg.RedirectURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Path != ssoCallbackPath {
		return fmt.Errorf("the SSO redirect URL %q must be an http(s) URL ending in %s", cfg.RedirectURL, ssoCallbackPath)
	}
	if len(cfg.ClientSecret) < 16 {
		return errors.New("CAIRN_OIDC_CLIENT_SECRET is shorter than 16 characters: it also keys the UI's SSO cookies")
	}
	return nil
}

func newSSO(cfg SSOConfig) (*sso, error) {
	if err := CheckSSOConfig(&cfg); err != nil {
		return nil, err
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{oidc.ScopeOpenID, oidc.ScopeProfile, oidc.ScopeEmail}
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	derive := func(purpose string) []byte {
		m := hmac.New(sha256.New, []byte(cfg.ClientSecret))
		m.Write([]byte("cairn ui sso " + purpose))
		return m.Sum(nil)
	}
	opts := []httphelper.CookieHandlerOpt{httphelper.WithPath("/ui/sso/"), httphelper.WithMaxAge(600),
		httphelper.WithSameSite(http.SameSiteLaxMode)} // Lax: the provider's redirect back must carry it
	if strings.HasPrefix(cfg.RedirectURL, "http://") {
		opts = append(opts, httphelper.WithUnsecure())
	}
	return &sso{cfg: cfg, cookies: httphelper.NewCookieHandler(derive("cookie hash"), derive("cookie encryption"), opts...),
		markKey: derive("session mark")}, nil
}

// relyingParty returns the provider's client, running discovery the first time
// (again at most every 10 s after a failure).
func (s *sso) relyingParty(ctx context.Context) (rp.RelyingParty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.party != nil {
		return s.party, nil
	}
	if !s.lastTried.IsZero() && time.Since(s.lastTried) < 10*time.Second {
		return nil, errors.New("the identity provider's discovery failed a moment ago")
	}
	s.lastTried = time.Now()
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	party, err := rp.NewRelyingPartyOIDC(dctx, s.cfg.Issuer, s.cfg.ClientID, s.cfg.ClientSecret, s.cfg.RedirectURL, s.cfg.Scopes,
		rp.WithHTTPClient(s.cfg.HTTPClient),
		rp.WithVerifierOpts(rp.WithNonce(func(ctx context.Context) string { n, _ := ctx.Value(nonceKey{}).(string); return n })))
	if err != nil {
		return nil, fmt.Errorf("discover %s: %w", s.cfg.Issuer, err)
	}
	s.party = party
	return party, nil
}

// nonceKey carries the flow's nonce to the ID token verifier.
type nonceKey struct{}

// mark is what an SSO session keeps in place of a token's hash: an HMAC of its
// name, role and namespace under a key of the client secret, so a session row names a
// role only a server that holds the secret could have written, and changing
// the secret (or turning SSO off) ends every SSO session.
func (s *sso) mark(who api.Identity) []byte {
	m := hmac.New(sha256.New, s.markKey)
	m.Write([]byte(who.Name + "\x00" + who.Role.String() + "\x00" + who.Namespace))
	return m.Sum(nil)
}

// identify returns who an SSO session is, or the zero Identity when its mark
// does not match.
func (s *sso) identify(ss *catalog.Session) api.Identity {
	role, err := api.ParseRole(ss.Role)
	if err != nil {
		return api.Identity{}
	}
	who := api.Identity{Role: role, Name: ss.Name, Namespace: ss.Namespace}
	if subtle.ConstantTimeCompare(s.mark(who), ss.TokenHash) != 1 {
		return api.Identity{}
	}
	return who
}

// ssoFlow is the content of the flow's cookie.
type ssoFlow struct {
	State    string `json:"s"`
	Nonce    string `json:"n"`
	Verifier string `json:"v"`
	Next     string `json:"next"`
}

// ssoStart sends the browser to the provider, with a new state, nonce and PKCE
// challenge kept in the flow's cookie.
func (h *Handler) ssoStart(w http.ResponseWriter, r *http.Request) {
	party, err := h.sso.relyingParty(r.Context())
	if err != nil {
		h.logger.ErrorContext(r.Context(), "single sign-on: discovery", "error", err)
		h.ssoRefuse(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached now: try again in a moment, or log in with a token.")
		return
	}
	flow := ssoFlow{State: rand.Text(), Nonce: rand.Text(), Verifier: oauth2.GenerateVerifier(), Next: safeNext(r.URL.Query().Get("next"))}
	b, _ := json.Marshal(flow)
	if err := h.sso.cookies.SetCookie(w, ssoFlowCookie, base64.RawURLEncoding.EncodeToString(b)); err != nil {
		h.logger.ErrorContext(r.Context(), "single sign-on: cookie", "error", err)
		http.Error(w, "the sign-in could not be started: try again", http.StatusInternalServerError)
		return
	}
	http.Redirect(w, r, rp.AuthURL(flow.State, party,
		rp.WithCodeChallenge(oidc.NewSHACodeChallenge(flow.Verifier)),
		rp.AuthURLOpt(rp.WithURLParam("nonce", flow.Nonce))), http.StatusFound)
}

// ssoCallback finishes the flow: it checks the state against the cookie,
// exchanges the code (with the PKCE verifier; the ID token's signature, issuer,
// audience, expiry and nonce are verified), maps the claims to a role and starts
// a session; a user whose claims map to no role gets a 403 page saying why.
func (h *Handler) ssoCallback(w http.ResponseWriter, r *http.Request) {
	raw, err := h.sso.cookies.CheckCookie(r, ssoFlowCookie)
	var flow ssoFlow
	if err == nil {
		var b []byte
		if b, err = base64.RawURLEncoding.DecodeString(raw); err == nil {
			err = json.Unmarshal(b, &flow)
		}
	}
	if err != nil || flow.State == "" {
		h.ssoRefuse(w, r, http.StatusBadRequest, "This sign-in was not started here, or took longer than 10 minutes: sign in again.")
		return
	}
	h.sso.cookies.DeleteCookie(w, ssoFlowCookie)
	if subtle.ConstantTimeCompare([]byte(r.URL.Query().Get("state")), []byte(flow.State)) != 1 {
		h.ssoRefuse(w, r, http.StatusBadRequest, "The sign-in's state does not match: sign in again.")
		return
	}
	if e := r.URL.Query().Get("error"); e != "" {
		msg := "The identity provider refused the sign-in: " + e
		if d := r.URL.Query().Get("error_description"); d != "" {
			msg += " (" + d + ")"
		}
		h.ssoRefuse(w, r, http.StatusForbidden, msg)
		return
	}
	party, err := h.sso.relyingParty(r.Context())
	if err != nil {
		h.ssoRefuse(w, r, http.StatusServiceUnavailable, "The identity provider cannot be reached now: try again in a moment.")
		return
	}
	ctx := context.WithValue(r.Context(), nonceKey{}, flow.Nonce)
	tokens, err := rp.CodeExchange[*oidc.IDTokenClaims](ctx, r.URL.Query().Get("code"), party, rp.WithCodeVerifier(flow.Verifier))
	if err != nil {
		h.logger.WarnContext(r.Context(), "single sign-on: code exchange", "error", err)
		h.ssoRefuse(w, r, http.StatusUnauthorized, "The identity provider's answer could not be verified: sign in again.")
		return
	}
	claims := map[string]any{}
	for k, v := range tokens.IDTokenClaims.Claims {
		claims[k] = v
	}
	// Claims the ID token lacks may be in userinfo (some providers send groups
	// only there).
	if party.UserinfoEndpoint() != "" {
		info, err := rp.Userinfo[*oidc.UserInfo](r.Context(), tokens.AccessToken, tokens.TokenType, tokens.IDTokenClaims.GetSubject(), party)
		if err != nil {
			h.logger.WarnContext(r.Context(), "single sign-on: userinfo", "error", err)
		} else {
			for k, v := range info.Claims {
				if _, ok := claims[k]; !ok {
					claims[k] = v
				}
			}
		}
	}
	who := api.OIDCIdentity(h.sso.cfg.Roles, claims)
	if who.Role == api.RoleNone {
		h.logger.InfoContext(r.Context(), "single sign-on refused: no role", "name", who.Name)
		h.ssoRefuse(w, r, http.StatusForbidden, "You signed in as "+who.Name+", but Cairn gives you no role: "+h.sso.cfg.Roles.Unmapped(claims)+". Ask an administrator to add you to a group of CAIRN_OIDC_ROLE_MAP.")
		return
	}
	if !h.startSession(w, r, who, h.sso.mark(who)) {
		return
	}
	// A page, not a redirect: the session cookie is SameSite=Strict, and a
	// browser sends no Strict cookie on a redirect that a navigation from the
	// provider's site began. The page's own navigation is same-site.
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_ = ssoDonePage.Execute(w, flow.Next)
}

// ssoDonePage sends the browser on to the page it asked for.
var ssoDonePage = template.Must(template.New("sso").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={{.}}"><title>Signed in · Cairn</title>
<link rel="stylesheet" href="/ui/static/ui.css"></head>
<body><main><p id="sso-done">Signed in. <a href="{{.}}">Continue</a></p></main></body></html>`))

// ssoRefuse shows why a sign-in failed, as a page with status.
func (h *Handler) ssoRefuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.renderStatus(w, r, nil, "error", status, map[string]any{"Title": "Sign-in refused", "Status": status, "Message": msg, "Back": "/ui/login"})
}
