package ui

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/client"
	"github.com/cairnrun/cairn/namespace"
)

// Prefix is the path the UI is served under.
const Prefix = "/ui"

// sessionCookie holds the session ID of a logged-in browser (never its token; the
// catalog keeps the ID's hash: Sessions): HttpOnly (no script reads it),
// SameSite=Strict (no other site's page sends it), Path=/ui.
const sessionCookie = "cairn_session"

// DefaultSessionTTL is Config.SessionTTL's default.
const DefaultSessionTTL = 12 * time.Hour

// Sessions keeps the UI's sessions (catalog.Store implements it).
type Sessions interface {
	SessionCreate(ctx context.Context, s *catalog.Session) error
	SessionGet(ctx context.Context, idHash []byte) (*catalog.Session, error)
	SessionDelete(ctx context.Context, idHash []byte) error
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config tunes a Handler. A nil *Config means all defaults.
type Config struct {
	// Logger receives the UI's own errors (the API logs its requests); default:
	// discard.
	Logger *slog.Logger
	// PageSize is how many runs a page of the runs list shows; default 50.
	PageSize int
	// SessionTTL is how long a login lasts: the session then ends, and the
	// browser is sent to the login page. Default DefaultSessionTTL (12 hours).
	SessionTTL time.Duration
	// SSO, when set, offers "Sign in with SSO" on the login page (sso.go);
	// default none.
	SSO *SSOConfig
	// Identities, when set, says who a token is at login and on every request of
	// its session (api.Server.IdentifyHash: the managed tokens too, so a revoked
	// one ends its sessions); default: the tokens given to New only.
	Identities Identities
}

// Identities tells who a token is by its hash (api.Server implements it): the
// zero Identity for an unknown token, an error api.TokenRefused reports for an
// expired or revoked one.
type Identities interface {
	IdentifyHash(ctx context.Context, h [sha256.Size]byte) (api.Identity, error)
}

// staticIdentities are the tokens given to New.
type staticIdentities struct{ tokens *api.Tokens }

func (s staticIdentities) IdentifyHash(_ context.Context, h [sha256.Size]byte) (api.Identity, error) {
	return s.tokens.IdentifyHash(h), nil
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.PageSize <= 0 {
		out.PageSize = 50
	}
	if out.SessionTTL <= 0 {
		out.SessionTTL = DefaultSessionTTL
	}
	return out
}

// Handler serves the web UI. It reads and writes only through the Cairn API (the
// handler given to New, called in this process as the logged-in user), so
// the API stays the one place that decides what a token may see and do; the UI
// only hides what the token's role may not do. It is safe for concurrent use.
type Handler struct {
	apiHandler http.Handler
	tokens     *api.Tokens
	sessions   Sessions
	cfg        Config
	logger     *slog.Logger
	mux        *http.ServeMux
	pages      map[string]*template.Template
	sso        *sso // nil: no single sign-on
}

// New returns the UI. apiHandler is the API's handler (api.Server.Handler), which
// the UI calls in process; tokens are the API's tokens, which a login is checked
// against (and every request of a session again, so a token removed ends its
// sessions), also to show a user their role and name and to hide what the role
// may not do; sessions keeps the logged-in browsers.
func New(apiHandler http.Handler, tokens *api.Tokens, sessions Sessions, cfg *Config) (*Handler, error) {
	if sessions == nil {
		return nil, errors.New("web UI: no session store")
	}
	c := cfg.withDefaults()
	h := &Handler{
		apiHandler: apiHandler,
		tokens:     tokens,
		sessions:   sessions,
		cfg:        c,
		logger:     c.Logger.With("component", "ui"),
		mux:        http.NewServeMux(),
	}
	if tokens == nil {
		h.tokens = &api.Tokens{}
	}
	if c.SSO != nil {
		s, err := newSSO(*c.SSO)
		if err != nil {
			return nil, fmt.Errorf("web UI: %w", err)
		}
		h.sso = s
	}
	if h.cfg.Identities == nil {
		h.cfg.Identities = staticIdentities{h.tokens}
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	h.pages = pages
	h.routes()
	return h, nil
}

func (h *Handler) routes() {
	static, _ := fs.Sub(staticFS, "static")
	h.mux.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", withCache(http.FileServerFS(static))))
	h.mux.HandleFunc("GET /ui", redirectTo("/ui/runs"))
	h.mux.HandleFunc("GET /ui/{$}", redirectTo("/ui/runs"))
	h.mux.HandleFunc("GET /ui/login", h.loginPage)
	h.mux.HandleFunc("POST /ui/login", h.login)
	h.mux.HandleFunc("POST /ui/logout", h.write(h.logout))
	h.mux.HandleFunc("POST /ui/namespace", h.write(h.chooseNamespace))
	if h.sso != nil {
		h.mux.HandleFunc("GET /ui/sso/start", h.ssoStart)
		h.mux.HandleFunc("GET "+ssoCallbackPath, h.ssoCallback)
	}

	h.mux.HandleFunc("GET /ui/workflows", h.read(h.workflowsPage))
	h.mux.HandleFunc("GET /ui/workflows/{name}", h.read(h.workflowPage))
	h.mux.HandleFunc("POST /ui/workflows/{name}/pause", h.write(h.pauseWorkflow))
	h.mux.HandleFunc("POST /ui/workflows/{name}/resume", h.write(h.resumeWorkflow))
	h.mux.HandleFunc("POST /ui/workflows/{name}/runs", h.write(h.startRun))

	h.mux.HandleFunc("GET /ui/runs", h.read(h.runsPage))
	h.mux.HandleFunc("POST /ui/runs/bulk", h.write(h.bulk))
	h.mux.HandleFunc("GET /ui/operations/{id}", h.read(h.operationPage))
	h.mux.HandleFunc("GET /ui/runs/{id}", h.read(h.runPage))
	h.mux.HandleFunc("GET /ui/runs/{id}/state", h.read(h.runState))
	h.mux.HandleFunc("GET /ui/runs/{id}/events", h.read(h.runEvents))
	h.mux.HandleFunc("GET /ui/runs/{id}/timeline", h.read(h.runTimeline))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}", h.read(h.stepPanel))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/output", h.read(h.stepOutput))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/checkpoint", h.read(h.stepCheckpoint))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/logs", h.read(h.stepLog))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/items", h.read(h.itemsPage))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/items/{index}", h.read(h.itemPage))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/items/{index}/logs", h.read(h.itemLog))
	h.mux.HandleFunc("GET /ui/runs/{id}/steps/{key}/items/{index}/output", h.read(h.itemOutput))
	h.mux.HandleFunc("GET /ui/search", h.read(h.search))
	h.mux.HandleFunc("GET /ui/approvals", h.read(h.approvalsPage))
	h.mux.HandleFunc("POST /ui/runs/selected", h.write(h.bulkSelected))
	h.mux.HandleFunc("POST /ui/runs/{id}/cancel", h.write(h.cancelRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/retry", h.write(h.retryRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/pause", h.write(h.pauseRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/resume", h.write(h.resumeRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/rerun", h.write(h.rerunRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/signal", h.write(h.signalRun))
	h.mux.HandleFunc("POST /ui/runs/{id}/steps/{key}/decide", h.write(h.decideStep))

	h.mux.HandleFunc("GET /ui/events", h.read(h.eventsPage))
	h.mux.HandleFunc("GET /ui/events/{id...}", h.read(h.eventPage))

	h.mux.HandleFunc("GET /ui/limits", h.read(h.limitsPage))
	h.mux.HandleFunc("POST /ui/limits", h.write(h.setLimit))

	h.mux.HandleFunc("GET /ui/schedules", h.read(h.schedulesPage))
	h.mux.HandleFunc("GET /ui/audit", h.read(h.auditPage))
	h.mux.HandleFunc("POST /ui/schedules/{sid}/{action}", h.write(h.scheduleAction))
}

// ServeHTTP serves the UI's paths (Prefix and below). Every answer forbids framing
// and sniffing, and allows scripts, styles and connections to this origin only.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	h.mux.ServeHTTP(w, r)
}

func withCache(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		next.ServeHTTP(w, r)
	})
}

func redirectTo(path string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, path, http.StatusSeeOther)
	}
}

// session is a logged-in request: who it is and a client of the API acting as them.
type session struct {
	who    api.Identity
	csrf   string
	api    *client.Client
	idHash []byte
	// ns is the namespace the session's pages show: its token's, else the one
	// chosen in the header (namespaceCookie), else default.
	ns string
}

// namespaceCookie keeps the namespace a session of every namespace chose to see
// (POST /ui/namespace).
const namespaceCookie = "cairn_ns"

// canOperate reports whether the role may take operator actions (the buttons shown).
func (s *session) canOperate() bool { return s.who.Role >= api.RoleOperator }

// sessionOf returns the request's session, or nil when its cookie names none that
// lives: unknown, expired, logged out, or whose token the server no longer has.
func (h *Handler) sessionOf(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" || len(c.Value) > 128 {
		return nil
	}
	idHash := sha256.Sum256([]byte(c.Value))
	ss, err := h.sessions.SessionGet(r.Context(), idHash[:])
	if err != nil {
		if !errors.Is(err, catalog.ErrNotFound) {
			h.logger.WarnContext(r.Context(), "read a session", "error", err)
		}
		return nil
	}
	var tokenHash [sha256.Size]byte
	copy(tokenHash[:], ss.TokenHash)
	who, err := h.cfg.Identities.IdentifyHash(r.Context(), tokenHash)
	if err == nil && who.Role == api.RoleNone && h.sso != nil {
		who = h.sso.identify(ss) // a session single sign-on started
	}
	if err != nil || who.Role == api.RoleNone {
		return nil
	}
	ns := who.Namespace
	if ns == "" {
		ns = namespace.Default
		if c, err := r.Cookie(namespaceCookie); err == nil && namespace.Check(c.Value) == nil {
			ns = c.Value
		}
	}
	cl, err := client.New("http://cairn.in-process", "", client.WithHTTPClient(&http.Client{Transport: inProcess{h: h.apiHandler, who: who}}),
		client.WithNamespace(ns))
	if err != nil {
		return nil
	}
	return &session{who: who, csrf: csrfFor(c.Value), api: cl, idHash: idHash[:], ns: ns}
}

// csrfFor is the CSRF token of a session: a hash of its ID (which no other site
// can read), so it needs no storage and every server of a deployment computes the
// same one.
func csrfFor(sessionID string) string {
	m := hmac.New(sha256.New, []byte(sessionID))
	m.Write([]byte("cairn ui csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// read wraps a page: without a session, to the login page (coming back after).
func (h *Handler) read(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s := h.sessionOf(r)
		if s == nil {
			if strings.HasSuffix(r.URL.Path, "/state") || (strings.HasPrefix(r.URL.Path, "/ui/runs/") && strings.HasSuffix(r.URL.Path, "/events")) || strings.HasSuffix(r.URL.Path, "/timeline") || (strings.Contains(r.URL.Path, "/steps/") && !strings.Contains(r.URL.Path, "/items")) {
				http.Error(w, "log in first", http.StatusUnauthorized)
				return
			}
			http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		next(w, r, s)
	}
}

// write wraps an action (a POST): it needs a session, a same-origin request
// (Origin and Sec-Fetch-Site, when the browser sends them) and the session's CSRF
// token (form field csrf or header X-CSRF-Token). The SameSite=Strict cookie already
// keeps other sites out; the token also covers a browser that ignores SameSite.
// Roles are not checked here: the API refuses what the token may not do.
func (h *Handler) write(next func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !sameOrigin(r) {
			http.Error(w, "cross-origin request refused", http.StatusForbidden)
			return
		}
		s := h.sessionOf(r)
		if s == nil {
			http.Error(w, "log in first", http.StatusUnauthorized)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, 4<<20)
		got := r.Header.Get("X-CSRF-Token")
		if got == "" {
			got = r.PostFormValue("csrf")
		}
		if subtle.ConstantTimeCompare([]byte(got), []byte(s.csrf)) != 1 {
			http.Error(w, "missing or wrong CSRF token: reload the page", http.StatusForbidden)
			return
		}
		next(w, r, s)
	}
}

// sameOrigin refuses requests a browser marks as coming from another site.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" || origin == "null" {
		return origin == ""
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, r.Host)
}

func (h *Handler) loginPage(w http.ResponseWriter, r *http.Request) {
	h.render(w, r, nil, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next")), "Error": r.URL.Query().Get("error"), "SSO": h.sso != nil})
}

// login checks the token against the API's tokens, starts a session for it, and
// sets the session's cookie: a random ID, never the token.
func (h *Handler) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	who, err := h.cfg.Identities.IdentifyHash(r.Context(), api.TokenHash(token))
	if err != nil && !api.TokenRefused(err) {
		h.logger.ErrorContext(r.Context(), "check a token", "error", err)
		http.Error(w, "the token could not be checked: try again", http.StatusServiceUnavailable)
		return
	}
	if err != nil || who.Role == api.RoleNone {
		why := "unknown token"
		if err != nil {
			why = err.Error()
		}
		http.Redirect(w, r, "/ui/login?error="+url.QueryEscape(why)+"&next="+url.QueryEscape(next), http.StatusSeeOther)
		return
	}
	tokenHash := api.TokenHash(token)
	if h.startSession(w, r, who, tokenHash[:]) {
		http.Redirect(w, r, next, http.StatusSeeOther)
	}
}

// startSession starts a session for who and sets its cookie: a random ID, never
// a token. tokenHash is what sessionOf checks on every request: the hash of the
// token logged in with, or an SSO session's mark. false: it answered the request
// with an error.
func (h *Handler) startSession(w http.ResponseWriter, r *http.Request, who api.Identity, tokenHash []byte) bool {
	id := rand.Text() // 26 characters of base32: 128 random bits
	idHash := sha256.Sum256([]byte(id))
	expires := time.Now().Add(h.cfg.SessionTTL)
	audited := catalog.WithAudit(r.Context(), &catalog.Audit{Actor: who.Name, Role: who.Role.String(), Action: "uiLogin", RequestID: api.RequestID(r.Context())})
	if err := h.sessions.SessionCreate(audited, &catalog.Session{IDHash: idHash[:], TokenHash: tokenHash,
		Name: who.Name, Role: who.Role.String(), Namespace: who.Namespace, ExpiresAt: expires}); err != nil {
		h.logger.ErrorContext(r.Context(), "start a session", "error", err)
		http.Error(w, "the session could not be started: try again", http.StatusServiceUnavailable)
		return false
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: id, Path: Prefix, Expires: expires, MaxAge: int(h.cfg.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	return true
}

// logout ends the session (its row is deleted: the cookie's ID opens nothing any
// more, wherever it was copied to) and clears the cookie.
func (h *Handler) logout(w http.ResponseWriter, r *http.Request, s *session) {
	if err := h.sessions.SessionDelete(context.WithoutCancel(r.Context()), s.idHash); err != nil {
		h.logger.ErrorContext(r.Context(), "end a session", "error", err)
		http.Error(w, "the session could not be ended: try again", http.StatusServiceUnavailable)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
}

// chooseNamespace keeps the namespace a session of every namespace shows (its
// pages' requests carry it: sessionOf), then shows its runs. A session scoped to
// one namespace has nothing to choose.
func (h *Handler) chooseNamespace(w http.ResponseWriter, r *http.Request, s *session) {
	ns := r.PostFormValue("namespace")
	if s.who.Namespace != "" || namespace.Check(ns) != nil {
		http.Error(w, "no such namespace to choose", http.StatusBadRequest)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: namespaceCookie, Value: ns, Path: Prefix, MaxAge: int(h.cfg.SessionTTL / time.Second),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	http.Redirect(w, r, "/ui/runs", http.StatusSeeOther)
}

// safeNext keeps a post-login redirect inside the UI.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/ui/runs"
	}
	return next
}

// problemText is what the UI shows for an API error: its status, code and detail.
func problemText(err error) (int, string) {
	var p *client.Problem
	if errors.As(err, &p) {
		msg := p.Title
		if p.Detail != nil && *p.Detail != "" {
			msg = *p.Detail
		}
		return int(p.Status), p.Code + ": " + msg
	}
	if errors.Is(err, context.Canceled) {
		return 499, "canceled"
	}
	return http.StatusBadGateway, err.Error()
}
