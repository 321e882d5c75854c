// Package oidcprovider starts a real OpenID provider for tests, built on
// github.com/zitadel/oidc's op package: discovery, the authorization code flow
// with PKCE (and a login form a browser fills in), the client credentials grant
// issuing JWT access tokens (a CI system's workload identity), userinfo and a
// JWKS whose signing key a test can rotate. Users, their claims (groups) and
// clients are what the test configures; everything is kept in memory and lives
// as long as the test.
package oidcprovider

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"fmt"
	"html/template"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/zitadel/oidc/v3/pkg/op"
)

// User is a person who can sign in through the login form.
type User struct {
	// ID is the subject (sub) of the user's tokens.
	ID       string
	Username string
	Password string
	Email    string
	// Claims are added to the user's ID token and userinfo ("groups": []string{…}).
	Claims map[string]any
}

// WebClient is a relying party that signs users in with the authorization code
// flow (the web UI), authenticating with its secret.
type WebClient struct {
	ID           string
	Secret       string
	RedirectURIs []string
}

// Workload is a client of the client credentials grant: what a CI job's
// workload identity is. Its access tokens are JWTs.
type Workload struct {
	ID     string
	Secret string
	// Subject is the sub of its tokens (default ID).
	Subject string
	// Audience is the aud of its tokens (default: ID).
	Audience []string
	// Lifetime is how long its tokens live (default 5 minutes); negative: they
	// are issued already expired.
	Lifetime time.Duration
	// Claims are added to its tokens ("groups": []string{…}).
	Claims map[string]any
}

// Config is what a Provider knows; every field may be empty.
type Config struct {
	Users     []User
	Clients   []WebClient
	Workloads []Workload
	// Host is the issuer URL's host name (default 127.0.0.1; the provider listens
	// on 127.0.0.1 whatever it is). "localhost" puts the provider on another site
	// than a server on 127.0.0.1, as a real provider is: browsers then treat the
	// way back from it as a cross-site navigation.
	Host string
}

// Provider is a running OpenID provider. Its methods are safe for concurrent use.
type Provider struct {
	// Issuer is the provider's issuer URL (http://127.0.0.1:port).
	Issuer string
	st     *storage
}

// Start runs a provider on a loopback port until the test ends.
func Start(t testing.TB, cfg Config) *Provider {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("oidc provider: listen: %v", err)
	}
	host := cfg.Host
	if host == "" {
		host = "127.0.0.1"
	}
	issuer := "http://" + net.JoinHostPort(host, fmt.Sprint(ln.Addr().(*net.TCPAddr).Port))
	st := newStorage(cfg)
	if err := st.rotate(false); err != nil {
		t.Fatalf("oidc provider: key: %v", err)
	}
	var cryptoKey [32]byte
	_, _ = rand.Read(cryptoKey[:])
	provider, err := op.NewOpenIDProvider(issuer, &op.Config{
		CryptoKey:      cryptoKey,
		CodeMethodS256: true,
		AuthMethodPost: true,
	}, st, op.WithAllowInsecure())
	if err != nil {
		t.Fatalf("oidc provider: %v", err)
	}
	callback := op.AuthCallbackURL(provider)
	mux := http.NewServeMux()
	mux.Handle("/login", op.NewIssuerInterceptor(provider.IssuerFromRequest).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st.login(w, r, callback)
	})))
	mux.Handle("/", provider)
	srv := &httptest.Server{Listener: ln, Config: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	srv.Start()
	t.Cleanup(srv.Close)
	return &Provider{Issuer: issuer, st: st}
}

// Token returns an access token (a JWT) of workload id, fetched from the
// provider's token endpoint with the client credentials grant, as a CI job
// would.
func (p *Provider) Token(t testing.TB, id string) string {
	t.Helper()
	w, ok := p.st.workload(id)
	if !ok {
		t.Fatalf("oidc provider: no workload %q", id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	form := url.Values{"grant_type": {"client_credentials"}, "scope": {"openid"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.Issuer+"/oauth/token", stringsReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(w.ID), url.QueryEscape(w.Secret))
	var out struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
	}
	if err := doJSON(req, &out); err != nil {
		t.Fatalf("oidc provider: token of %s: %v", id, err)
	}
	if out.AccessToken == "" {
		t.Fatalf("oidc provider: token of %s: no access_token", id)
	}
	return out.AccessToken
}

// RotateKey makes a new signing key the one tokens are signed with from now
// on; the old key stays published in the JWKS when keepOld is true. It returns
// the new key's ID.
func (p *Provider) RotateKey(t testing.TB, keepOld bool) string {
	t.Helper()
	if err := p.st.rotate(keepOld); err != nil {
		t.Fatalf("oidc provider: rotate: %v", err)
	}
	return p.st.signingKeyID()
}

// KeyID returns the ID of the key tokens are signed with now.
func (p *Provider) KeyID() string { return p.st.signingKeyID() }

// JWKSFetches reports how many times the JWKS was fetched.
func (p *Provider) JWKSFetches() int { return p.st.keySetCalls() }

// SetClient adds a web client, or replaces the one with its ID (for a client
// whose redirect URL is known only once its server runs).
func (p *Provider) SetClient(c WebClient) {
	p.st.mu.Lock()
	defer p.st.mu.Unlock()
	p.st.clients = slices.DeleteFunc(p.st.clients, func(o WebClient) bool { return o.ID == c.ID })
	p.st.clients = append(p.st.clients, c)
}

// SetWorkload adds a workload, or replaces the one with its ID.
func (p *Provider) SetWorkload(w Workload) { p.st.setWorkload(w) }

// loginPage is the provider's sign-in form.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><title>Test provider: sign in</title></head><body>
<h1>Test provider</h1>
{{with .Error}}<p id="provider-error">{{.}}</p>{{end}}
<form method="post" action="/login">
<input type="hidden" name="authRequestID" value="{{.ID}}">
<label>Username <input id="provider-username" name="username"></label>
<label>Password <input id="provider-password" name="password" type="password"></label>
<button id="provider-login" type="submit">Sign in</button>
</form></body></html>`))

// login shows the sign-in form (GET) or checks it (POST): a known user's auth
// request is then done, and the browser goes on to the provider's callback,
// which redirects to the client with a code.
func (s *storage) login(w http.ResponseWriter, r *http.Request, callback func(context.Context, string) string) {
	id := r.FormValue("authRequestID")
	if r.Method == http.MethodGet {
		_ = loginPage.Execute(w, map[string]string{"ID": id})
		return
	}
	user, ok := s.checkPassword(r.FormValue("username"), r.FormValue("password"))
	if !ok {
		w.WriteHeader(http.StatusUnauthorized)
		_ = loginPage.Execute(w, map[string]string{"ID": id, "Error": "wrong username or password"})
		return
	}
	if err := s.finishAuthRequest(id, user.ID); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	http.Redirect(w, r, callback(r.Context(), id), http.StatusFound)
}

// signingKey is one RSA key of the provider.
type signingKey struct {
	id  string
	key *rsa.PrivateKey
}

// storage is the provider's state (op.Storage), in memory.
type storage struct {
	mu        sync.Mutex
	users     []User
	clients   []WebClient
	workloads []Workload
	requests  map[string]*authRequest
	codes     map[string]string // code → auth request ID
	tokens    map[string]*accessToken
	keys      []signingKey // the last signs
	keySets   int
}

func newStorage(cfg Config) *storage {
	return &storage{
		users: slices.Clone(cfg.Users), clients: slices.Clone(cfg.Clients), workloads: slices.Clone(cfg.Workloads),
		requests: map[string]*authRequest{}, codes: map[string]string{}, tokens: map[string]*accessToken{},
	}
}

func (s *storage) rotate(keepOld bool) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	k := signingKey{id: rand.Text()[:12], key: key}
	s.mu.Lock()
	defer s.mu.Unlock()
	if keepOld {
		s.keys = append(s.keys, k)
	} else {
		s.keys = []signingKey{k}
	}
	return nil
}

func (s *storage) signingKeyID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1].id
}

func (s *storage) keySetCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keySets
}

func (s *storage) workload(id string) (Workload, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range s.workloads {
		if w.ID == id {
			return w, true
		}
	}
	return Workload{}, false
}

func (s *storage) setWorkload(w Workload) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workloads = slices.DeleteFunc(s.workloads, func(o Workload) bool { return o.ID == w.ID })
	s.workloads = append(s.workloads, w)
}

func (s *storage) user(id string) (User, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.users {
		if u.ID == id {
			return u, true
		}
	}
	return User{}, false
}

func (s *storage) checkPassword(username, password string) (User, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, u := range s.users {
		if u.Username == username && u.Password == password {
			return u, true
		}
	}
	return User{}, false
}

func (s *storage) finishAuthRequest(id, userID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	req, ok := s.requests[id]
	if !ok {
		return errors.New("unknown auth request")
	}
	req.userID, req.done, req.authTime = userID, true, time.Now()
	return nil
}

// errNotFound is what the storage answers for an unknown object.
var errNotFound = errors.New("not found")

func doJSON(req *http.Request, out any) error {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return decodeJSON(resp, out)
}
