package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/danielgtaylor/huma/v2/adapters/humago"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/secrets"
)

// Title and the API version stamped into the OpenAPI document.
const (
	Title      = "Cairn API"
	APIVersion = "1.0.0"
)

// Config tunes a Server. A nil *Config means all defaults.
type Config struct {
	// Logger receives request logs; default: discard.
	Logger *slog.Logger
	// ReadyCheck, when set, is an extra readiness check run by GET /readyz after the
	// database, blob store and schema checks; default none.
	ReadyCheck func(ctx context.Context) error
	// Capabilities, when set, says what this server's dispatcher can run (one entry
	// per step kind, and its cache: "ok…" or why not); GET /readyz shows them
	// beside its checks without failing on them: other kinds still run. Default none.
	Capabilities func() map[string]string
	// Registry, when set, receives the API's Prometheus series and is served at
	// GET /metrics (with whatever else the caller registered there, such as the
	// dispatcher's: runtime.Config.Registerer takes the same registry). Default none:
	// no /metrics, and the series are counted nowhere.
	Registry *prometheus.Registry
	// Tracer records a span per request (internal/tracing); default nil, none.
	Tracer *tracing.Tracer
	// SigningKey verifies lease credentials on PUT …/checkpoint (the dispatchers sign
	// them with the same key); default none, so that operation answers 401.
	SigningKey []byte
	// InlineLimit is the largest checkpoint, signal or callback body kept inline;
	// default blobstore.DefaultInlineLimit (256 KiB), as for the dispatchers'
	// outputs.
	InlineLimit int64
	// TempDir is where uploads are unpacked for validation; default os.TempDir().
	TempDir string
	// BundleLimits bounds an uploaded bundle (entries, sizes, steps per workflow);
	// zero fields mean bundle's defaults.
	BundleLimits bundle.Limits
	// Tokens are the bearer tokens and their roles; default none, so every
	// protected operation answers 401.
	Tokens *Tokens
	// Bearers, when set, identifies the bearers that are none of Tokens (OIDC
	// JWTs: OIDCBearers); default none.
	Bearers BearerVerifier
	// MetricsToken, when set, is the bearer token GET /metrics requires (an admin
	// token of Tokens is accepted too); default none: /metrics is open to anyone who
	// reaches the server.
	MetricsToken string
	// MaxCheckpointSize is the largest body of PUT …/checkpoint, in bytes; a larger
	// one is a 413, refused unread when its Content-Length says so. Default
	// DefaultMaxCheckpointSize (256 MiB).
	MaxCheckpointSize int64
	// MaxStreams caps the event streams (GET …/events/stream) open at once on this
	// server; one more is a 503 with Retry-After. Default DefaultMaxStreams (1,000).
	MaxStreams int
	// BodyReadTimeout and MinBodyRate bound how slowly a request body may arrive
	// (see Handler): over each BodyReadTimeout the server spends waiting for the
	// body, at least BodyReadTimeout × MinBodyRate bytes must come, or the read fails
	// and the connection is closed. Defaults DefaultBodyReadTimeout (30 s) and
	// DefaultMinBodyRate (4 KiB/s).
	BodyReadTimeout time.Duration
	MinBodyRate     int64
	// SecretKeys seal and open the values of PUT /v1/secrets/{name} (and so the
	// secrets webhooks are verified with); default none: the secrets operations
	// answer 503 secret_key_missing, and so do webhook deliveries.
	SecretKeys *secrets.Keyring
}

// Defaults of Config.
const (
	DefaultMaxStreams      = 1000
	DefaultBodyReadTimeout = 30 * time.Second
	DefaultMinBodyRate     = 4 << 10
)

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Tokens == nil {
		out.Tokens = &Tokens{}
	}
	if out.InlineLimit <= 0 {
		out.InlineLimit = blobstore.DefaultInlineLimit
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.MaxCheckpointSize <= 0 {
		out.MaxCheckpointSize = DefaultMaxCheckpointSize
	}
	if out.MaxStreams <= 0 {
		out.MaxStreams = DefaultMaxStreams
	}
	if out.BodyReadTimeout <= 0 {
		out.BodyReadTimeout = DefaultBodyReadTimeout
	}
	if out.MinBodyRate <= 0 {
		out.MinBodyRate = DefaultMinBodyRate
	}
	return out
}

// Server holds the API's routes and their dependencies. It is safe for concurrent use.
type Server struct {
	store  *catalog.Store
	blobs  blobstore.Store
	cfg    Config
	logger *slog.Logger
	mux    *http.ServeMux
	api    huma.API

	vault       *secrets.Vault
	metrics     *Metrics      // nil without Config.Registry
	streamsDone chan struct{} // closed by CloseStreams
	closeOnce   sync.Once
	streams     chan struct{} // one element per open event stream, up to MaxStreams
	pulse       *pulse        // wakes the event streams together
	polls       sharedPolls   // their polls of the catalog, shared
	managed     managedTokens // the catalog's tokens (tokens.go)
	namespaces  namespaceCache
}

// CloseStreams ends every open event stream (at shutdown: http.Server.Shutdown does
// not end long-lived responses by itself). Safe to call more than once.
func (s *Server) CloseStreams() {
	s.closeOnce.Do(func() { close(s.streamsDone) })
}

// New registers every operation and returns the server. store and blobs are required.
func New(store *catalog.Store, blobs blobstore.Store, cfg *Config) *Server {
	c := cfg.withDefaults()
	s := &Server{
		store:  store,
		blobs:  blobs,
		cfg:    c,
		logger: c.Logger.With("component", "api"),
		mux:    http.NewServeMux(),

		streamsDone: make(chan struct{}),
		streams:     make(chan struct{}, c.MaxStreams),
		pulse:       newPulse(ssePollInterval),
	}
	s.vault = secrets.NewVault(store, c.SecretKeys)
	s.managed.store = store
	useProblems()
	s.api = humago.New(s.mux, NewConfig())
	s.api.UseMiddleware(s.bodyGuardMiddleware, s.authMiddleware, s.auditMiddleware)
	if c.Registry != nil {
		s.metrics = newMetrics(c.Registry)
		s.mux.Handle("GET /metrics", s.withMetricsToken(promhttp.HandlerFor(c.Registry, promhttp.HandlerOpts{})))
	}
	s.registerHealth()
	s.registerWorkflows()
	s.registerAliases()
	s.registerRuns()
	s.registerOperations()
	s.registerRetry()
	s.registerRunLookup()
	s.registerPause()
	s.registerBundles()
	s.registerCheckpoint()
	s.registerSteps()
	s.registerArchivedRuns()
	s.registerSignals()
	s.registerReceivedEvents()
	s.registerApprovals()
	s.registerCallbacks()
	s.registerEvents()
	s.registerSecrets()
	s.registerLimits()
	s.registerQuotas()
	s.registerCapacity()
	s.registerHooks()
	s.registerSchedules()
	s.registerTokens()
	s.registerAudit()
	s.registerNamespaces()
	return s
}

// withMetricsToken guards GET /metrics when Config.MetricsToken is set: the bearer
// token must be it or an admin token, compared in constant time; otherwise 401.
func (s *Server) withMetricsToken(next http.Handler) http.Handler {
	if s.cfg.MetricsToken == "" {
		return next
	}
	want := sha256.Sum256([]byte(s.cfg.MetricsToken))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		token = strings.TrimSpace(token)
		if strings.EqualFold(scheme, "Bearer") && token != "" {
			have := sha256.Sum256([]byte(token))
			if subtle.ConstantTimeCompare(have[:], want[:]) == 1 || s.cfg.Tokens.Lookup(token) == RoleAdmin {
				next.ServeHTTP(w, r)
				return
			}
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="cairn"`)
		writeProblem(w, classUnauthorized.problem("GET /metrics needs the metrics token or an admin token as bearer token"))
	})
}

// NewConfig returns the Huma configuration of the Cairn API: OpenAPI 3.1 at
// /openapi.json and /openapi.yaml, docs at /docs, no $schema links in bodies.
func NewConfig() huma.Config {
	cfg := huma.DefaultConfig(Title, APIVersion)
	cfg.CreateHooks = nil // no $schema fields or Link headers in responses
	cfg.Info.Description = "Cairn is a durable, serverless-style function runtime on PostgreSQL and S3-compatible object storage.\n\n" +
		"Errors are RFC 9457 problem documents (application/problem+json). Each has a stable `code`, its error class, and the HTTP status comes from the class; " +
		"clients switch on `code`, never on `title` or `detail`. Each operation lists the classes it answers with. The classes:\n\n" + problemTable() +
		"\n\nNamespaces: every operation under /v1 acts in one namespace: the one its token is scoped to; else the one the `Cairn-Namespace` request header names (webhook deliveries: also `?namespace=`); else `default`. Names resolve in it and lists hold its objects only; a token scoped to a namespace gets 404 for an object of another one. See docs/security.md, \"Namespaces\"."
	cfg.Components.SecuritySchemes = map[string]*huma.SecurityScheme{
		securityScheme: {Type: "http", Scheme: "bearer", Description: "A token from CAIRN_TOKENS, or a managed token (POST /v1/tokens); roles viewer, operator, admin."},
	}
	return cfg
}

// Mount serves h at pattern (a ServeMux pattern such as "/ui/") beside the API's
// operations, behind the same request IDs, access log and panic recovery: the web
// UI (package ui) is mounted so. Call it before serving.
func (s *Server) Mount(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// API returns the Huma API (its OpenAPI document, for export and tests).
func (s *Server) API() huma.API { return s.api }

// Handler returns the HTTP handler with request IDs, logging, panic recovery and the
// request body guard (BodyReadTimeout, MinBodyRate). The guard sets read deadlines
// through http.ResponseController, so Handler must get the server's own
// ResponseWriter (or one that unwraps to it).
func (s *Server) Handler() http.Handler {
	return s.withRequestID(s.withBodyGuard(s.withRecovery(s.withLogging(s.withTracing(s.mux)))))
}

// register adds an operation whose parameters and body are checked for text the
// catalog cannot store (withTextChecks) and whose handler errors are mapped to
// problems in one place (problemFor). role is the least role that may call it
// (RoleNone: public); errs are the error classes its handler returns, beside those
// every operation of its kind may answer (see errorResponses), for the OpenAPI
// document.
func register[I, O any](s *Server, op huma.Operation, role Role, errs []problemClass, h func(context.Context, *I) (*O, error)) {
	if len(op.Errors) > 0 {
		panic("register " + op.OperationID + ": list the error classes in errs, not statuses in op.Errors") // a programming error
	}
	op = withRole(op, role)
	op = withNamespaceHeader(op, role)
	op.Responses = errorResponses[I](s.api, op, role, errs)
	checked := withTextChecks(h)
	huma.Register(s.api, op, func(ctx context.Context, in *I) (*O, error) {
		out, err := checked(ctx, in)
		if err != nil {
			return nil, auditFailure(ctx, s.problemFor(ctx, err))
		}
		return out, nil
	})
}
