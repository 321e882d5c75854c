package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/cairnrun/cairn/api"
	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/catalog"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/runtime"
)

// shutdownGrace bounds how long in-flight HTTP requests may take to drain.
const shutdownGrace = 10 * time.Second

// runtimeFlags are the dispatcher settings shared by serve and dev.
type runtimeFlags struct {
	concurrency   int
	leaseTTL      time.Duration
	inlineLimit   int64
	shutdownGrace time.Duration
	signingKey    string
	noDispatcher  bool
	cacheDir      string
	publicURL     string
	execIsolation string
	execUID       int
	// httpAllowLocal is "true", "false" or "" (serve: false; dev: true).
	httpAllowLocal string
	// devDefaults (cairn dev) gives the laptop's defaults: exec handlers run
	// unisolated, with a warning, when bubblewrap does not work and no isolation
	// was asked for; http steps may call local addresses.
	devDefaults bool
}

func (f *runtimeFlags) register(fs *pflag.FlagSet, e env) {
	fs.IntVar(&f.concurrency, "concurrency", envInt(e, "CAIRN_CONCURRENCY", 0), "attempts run at once by this process's dispatcher; 0 = 128 (env CAIRN_CONCURRENCY)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", envDuration(e, "CAIRN_LEASE_TTL", 30*time.Second), "lease of a claimed step without heartbeat (env CAIRN_LEASE_TTL)")
	fs.Int64Var(&f.inlineLimit, "inline-limit", int64(envInt(e, "CAIRN_INLINE_LIMIT", 256<<10)), "largest output or checkpoint kept in the catalog row, in bytes (env CAIRN_INLINE_LIMIT)")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", envDuration(e, "CAIRN_SHUTDOWN_GRACE", 10*time.Second), "how long running attempts may finish at shutdown before their leases are handed back (env CAIRN_SHUTDOWN_GRACE)")
	fs.StringVar(&f.signingKey, "signing-key", e("CAIRN_SIGNING_KEY"), "HMAC key that signs requests to http functions; shared by every server (env CAIRN_SIGNING_KEY)")
	fs.BoolVar(&f.noDispatcher, "no-dispatcher", false, "serve the API only, run no dispatcher")
	fs.StringVar(&f.publicURL, "public-url", e("CAIRN_PUBLIC_URL"), "the API's URL as functions reach it, for checkpoint_url in envelopes (env CAIRN_PUBLIC_URL; default http://<listen address>)")
	fs.StringVar(&f.cacheDir, "cache-dir", e("CAIRN_CACHE_DIR"), "folder for extracted bundles and downloaded inputs (env CAIRN_CACHE_DIR; default $TMPDIR/cairn-cache)")
	fs.StringVar(&f.execIsolation, "exec-isolation", e("CAIRN_EXEC_ISOLATION"), "how exec handlers are kept from the server: bwrap (a bubblewrap sandbox; exec steps are refused where it does not work) or none (unisolated, as the server's user); default bwrap, and for cairn dev bwrap when it works, else none (env CAIRN_EXEC_ISOLATION; see docs/security.md)")
	fs.StringVar(&f.httpAllowLocal, "http-allow-local", e("CAIRN_HTTP_ALLOW_LOCAL"), "let http steps call loopback and link-local addresses (this machine, cloud instance credentials): true or false; default false, and true for cairn dev (env CAIRN_HTTP_ALLOW_LOCAL)")
	fs.IntVar(&f.execUID, "exec-uid", envInt(e, "CAIRN_EXEC_UID", functions.DefaultSandboxUID), "uid and gid of sandboxed exec handlers when the server runs as root (env CAIRN_EXEC_UID)")
}

// newExecInvoker makes the exec invoker with the isolation rf asks for, and says at
// start-up how handlers will run.
func newExecInvoker(rf runtimeFlags, logger *slog.Logger) (*functions.Exec, error) {
	mode, fallback := rf.execIsolation, false
	if mode == "" {
		mode, fallback = string(functions.IsolationBwrap), rf.devDefaults
	}
	iso, err := functions.ParseIsolation(mode)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_EXEC_ISOLATION: %w", err)
	}
	cfg := &functions.ExecConfig{Logger: logger, Isolation: iso, SandboxUID: rf.execUID}
	inv := functions.NewExec(cfg)
	how, err := inv.Isolation()
	switch {
	case err != nil && fallback:
		logger.Warn("exec handlers run UNISOLATED, as this server's user: they can read its environment and files (set CAIRN_EXEC_ISOLATION=none to silence this)", "reason", err)
		cfg.Isolation = functions.IsolationNone
		inv = functions.NewExec(cfg)
	case err != nil:
		logger.Error("exec steps will be refused: handlers cannot be isolated here", "reason", err)
	case iso == functions.IsolationNone:
		logger.Warn("CAIRN_EXEC_ISOLATION=none: exec handlers run unisolated, as this server's user: they can read its environment and files")
	default:
		logger.Info("exec handlers isolated", "how", how)
	}
	return inv, nil
}

// limitFlags bound what one server gives its clients (security audit 1); shared by
// serve and dev. Zero means the default; negative values are refused.
type limitFlags struct {
	maxConnections    int
	maxStreams        int
	idleTimeout       time.Duration
	bodyReadTimeout   time.Duration
	minBodyRate       int64
	maxCheckpointSize int64
	maxSteps          int
	metricsToken      string
}

// defaultIdleTimeout is how long an idle keep-alive connection is kept: long enough
// for a client's next request in a burst, short enough that idle connections do not
// pile up towards the connection cap.
const defaultIdleTimeout = 120 * time.Second

func (f *limitFlags) register(fs *pflag.FlagSet, e env) {
	fs.IntVar(&f.maxConnections, "max-connections", envInt(e, "CAIRN_MAX_CONNECTIONS", api.DefaultMaxConnections), "HTTP connections open at once; more are answered 503 with Retry-After (env CAIRN_MAX_CONNECTIONS)")
	fs.IntVar(&f.maxStreams, "max-streams", envInt(e, "CAIRN_MAX_STREAMS", api.DefaultMaxStreams), "event streams (GET …/events/stream) open at once; more are answered 503 with Retry-After (env CAIRN_MAX_STREAMS)")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", envDuration(e, "CAIRN_IDLE_TIMEOUT", defaultIdleTimeout), "how long an idle keep-alive connection is kept open (env CAIRN_IDLE_TIMEOUT)")
	fs.DurationVar(&f.bodyReadTimeout, "body-read-timeout", envDuration(e, "CAIRN_BODY_READ_TIMEOUT", api.DefaultBodyReadTimeout), "window over which an upload (bundle, checkpoint) must arrive at --min-body-rate, or is cut (env CAIRN_BODY_READ_TIMEOUT)")
	fs.Int64Var(&f.minBodyRate, "min-body-rate", int64(envInt(e, "CAIRN_MIN_BODY_RATE", api.DefaultMinBodyRate)), "slowest upload rate accepted, in bytes per second, averaged over --body-read-timeout (env CAIRN_MIN_BODY_RATE)")
	fs.Int64Var(&f.maxCheckpointSize, "max-checkpoint-size", int64(envInt(e, "CAIRN_MAX_CHECKPOINT_SIZE", api.DefaultMaxCheckpointSize)), "largest checkpoint accepted by PUT …/checkpoint, in bytes (env CAIRN_MAX_CHECKPOINT_SIZE)")
	fs.IntVar(&f.maxSteps, "max-steps", envInt(e, "CAIRN_MAX_STEPS", bundle.DefaultMaxSteps), "most steps a deployed workflow may have (env CAIRN_MAX_STEPS)")
	fs.StringVar(&f.metricsToken, "metrics-token", e("CAIRN_METRICS_TOKEN"), "bearer token GET /metrics requires (an admin token works too); empty: /metrics is open (env CAIRN_METRICS_TOKEN)")
}

// check refuses negative limits and a metrics token short enough to guess.
func (f *limitFlags) check() error {
	for _, v := range []struct {
		name string
		val  int64
	}{
		{"--max-connections", int64(f.maxConnections)},
		{"--max-streams", int64(f.maxStreams)},
		{"--idle-timeout", int64(f.idleTimeout)},
		{"--body-read-timeout", int64(f.bodyReadTimeout)},
		{"--min-body-rate", f.minBodyRate},
		{"--max-checkpoint-size", f.maxCheckpointSize},
		{"--max-steps", int64(f.maxSteps)},
	} {
		if v.val < 0 {
			return fmt.Errorf("%s must not be negative", v.name)
		}
	}
	if f.metricsToken != "" && len(f.metricsToken) < 16 {
		return errors.New("--metrics-token (CAIRN_METRICS_TOKEN) is shorter than 16 characters")
	}
	return nil
}

func newServeCmd(e env, stdout, stderr io.Writer) *cobra.Command {
	var (
		listen, dbURL, blobURL string
		tokensSpec, tokensFile string
		rf                     runtimeFlags
		lf                     limitFlags
	)
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API and run a dispatcher against CAIRN_DATABASE_URL and CAIRN_BLOBSTORE",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			logger := newLogger(e, stderr)
			if dbURL == "" {
				return errors.New("no database: set --database-url or CAIRN_DATABASE_URL")
			}
			if blobURL == "" {
				return errors.New("no blob store: set --blobstore or CAIRN_BLOBSTORE (file:///path or s3://bucket?endpoint=...)")
			}
			tokens, err := loadTokens(tokensSpec, tokensFile)
			if err != nil {
				return err
			}
			if tokens.Len() == 0 {
				logger.Warn("no tokens configured (CAIRN_TOKENS or CAIRN_TOKENS_FILE): every /v1 operation will answer 401")
			}
			if err := lf.check(); err != nil {
				return err
			}
			if lf.metricsToken == "" {
				logger.Warn("no CAIRN_METRICS_TOKEN: /metrics is open to anyone who reaches the server")
			}
			store, err := openStore(ctx, dbURL, logger)
			if err != nil {
				return err
			}
			defer store.Close()
			if err := catalog.CheckSchema(ctx, store.DB().DB); err != nil {
				return err
			}
			blobs, err := blobstore.Open(ctx, blobURL, e)
			if err != nil {
				return fmt.Errorf("open blob store: %w", err)
			}
			if rf.signingKey == "" {
				logger.Warn("no CAIRN_SIGNING_KEY: http functions get requests signed with a random per-process key")
				rf.signingKey = newToken()
			}
			lambdaInvoker, err := newLambdaInvoker(ctx, e, logger)
			if err != nil {
				return err
			}
			return runServer(ctx, serverParts{listen: listen, dbURL: dbURL, store: store, blobs: blobs, tokens: tokens, logger: logger, rt: rf, limits: lf, lambda: lambdaInvoker}, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", e.or("CAIRN_LISTEN", "127.0.0.1:8080"), "address to serve HTTP on (env CAIRN_LISTEN)")
	f.StringVar(&dbURL, "database-url", e("CAIRN_DATABASE_URL"), "PostgreSQL URL (env CAIRN_DATABASE_URL)")
	f.StringVar(&blobURL, "blobstore", e("CAIRN_BLOBSTORE"), "blob store URL: file:///path or s3://bucket?endpoint=http://host:9000&region=us-east-1 (env CAIRN_BLOBSTORE)")
	f.StringVar(&tokensSpec, "tokens", e("CAIRN_TOKENS"), "bearer tokens as role:token,... (env CAIRN_TOKENS)")
	f.StringVar(&tokensFile, "tokens-file", e("CAIRN_TOKENS_FILE"), "file of role:token lines (env CAIRN_TOKENS_FILE)")
	rf.register(f, e)
	lf.register(f, e)
	return cmd
}

func loadTokens(spec, file string) (*api.Tokens, error) {
	tokens, err := api.ParseTokens(spec)
	if err != nil {
		return nil, fmt.Errorf("CAIRN_TOKENS: %w", err)
	}
	if file != "" {
		more, err := api.ReadTokensFile(file)
		if err != nil {
			return nil, err
		}
		tokens.Merge(more)
	}
	return tokens, nil
}

func openStore(ctx context.Context, url string, logger *slog.Logger) (*catalog.Store, error) {
	if url == "" {
		return nil, errors.New("no database: set --database-url or CAIRN_DATABASE_URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return catalog.Open(ctx, url, &catalog.Config{Logger: logger})
}

// serverParts is what runServer runs.
type serverParts struct {
	listen string
	dbURL  string
	store  *catalog.Store
	blobs  blobstore.Store
	tokens *api.Tokens
	logger *slog.Logger
	rt     runtimeFlags
	limits limitFlags
	lambda functions.Invoker // nil: no lambda steps here (see newLambdaInvoker)
}

// newHTTPServer returns the API's http.Server with its timeouts:
//   - ReadHeaderTimeout (10 s): a request's headers, and a new connection's silence;
//   - IdleTimeout (--idle-timeout): an idle keep-alive connection is closed after it;
//   - no ReadTimeout: it would bound whole uploads, and a legitimate 1 GiB bundle over
//     a slow link takes minutes; bodies are bounded by rate instead (api.Config's
//     BodyReadTimeout and MinBodyRate), and Huma gives JSON bodies 5 s;
//   - no WriteTimeout: event streams and downloads last as long as they need.
func newHTTPServer(h http.Handler, lim limitFlags, logger *slog.Logger) *http.Server {
	idle := lim.idleTimeout
	if idle <= 0 {
		idle = defaultIdleTimeout
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       idle,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// runServer runs the dispatcher and serves the API until ctx ends, then drains HTTP
// for at most shutdownGrace and stops the dispatcher (running attempts get their grace,
// then their leases are handed back). onListen, when set, is called with the bound
// address once the listener is open.
func runServer(ctx context.Context, p serverParts, onListen func(addr string)) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.listen, err)
	}
	addr := ln.Addr().String()
	publicURL := p.rt.publicURL
	if publicURL == "" {
		publicURL = "http://" + addr
	}
	var disp *runtime.Dispatcher
	var capabilities func() map[string]string
	if !p.rt.noDispatcher {
		execInvoker, err := newExecInvoker(p.rt, p.logger)
		if err != nil {
			ln.Close()
			return err
		}
		allowLocal := p.rt.devDefaults
		if p.rt.httpAllowLocal != "" {
			if allowLocal, err = strconv.ParseBool(p.rt.httpAllowLocal); err != nil {
				ln.Close()
				return fmt.Errorf("CAIRN_HTTP_ALLOW_LOCAL=%q: want true or false", p.rt.httpAllowLocal)
			}
		}
		disp, err = runtime.New(p.store, p.blobs, &runtime.Config{
			Concurrency:   p.rt.concurrency,
			LeaseTTL:      p.rt.leaseTTL,
			InlineLimit:   p.rt.inlineLimit,
			ShutdownGrace: p.rt.shutdownGrace,
			CacheDir:      p.rt.cacheDir,
			DatabaseURL:   p.dbURL,
			SigningKey:    []byte(p.rt.signingKey),
			PublicURL:     publicURL,
			Logger:        p.logger,
			Registerer:    reg,
			Invokers: map[bundle.Kind]functions.Invoker{
				bundle.KindExec:   execInvoker,
				bundle.KindHTTP:   functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte(p.rt.signingKey), Logger: p.logger, AllowLocal: allowLocal}),
				bundle.KindLambda: p.lambda,
			},
		})
		if err != nil {
			ln.Close()
			return err
		}
		capabilities = disp.Capabilities
	}

	metrics := api.NewMetrics(reg)
	lim := p.limits
	srv := api.New(p.store, p.blobs, &api.Config{
		Logger: p.logger, Tokens: p.tokens, Gatherer: reg, Metrics: metrics,
		SigningKey: []byte(p.rt.signingKey), InlineLimit: p.rt.inlineLimit,
		MetricsToken: lim.metricsToken, MaxCheckpointSize: lim.maxCheckpointSize, MaxStreams: lim.maxStreams,
		BodyReadTimeout: lim.bodyReadTimeout, MinBodyRate: lim.minBodyRate,
		BundleLimits: bundle.Limits{MaxSteps: lim.maxSteps},
		Capabilities: capabilities,
	})
	if disp != nil {
		if err := disp.Start(ctx); err != nil {
			ln.Close()
			return err
		}
	}
	httpSrv := newHTTPServer(srv.Handler(), lim, p.logger)
	httpSrv.RegisterOnShutdown(srv.CloseStreams)
	limited := api.LimitConnections(ln, lim.maxConnections, &api.ConnLimitConfig{Server: httpSrv, Metrics: metrics, Logger: p.logger})
	errc := make(chan error, 1)
	go func() { errc <- httpSrv.Serve(limited) }()
	p.logger.Info("serving", "url", "http://"+addr)
	if onListen != nil {
		onListen(addr)
	}
	var serveErr error
	select {
	case err := <-errc:
		serveErr = fmt.Errorf("serve http: %w", err)
	case <-ctx.Done():
	}
	p.logger.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := httpSrv.Shutdown(sctx); err != nil {
		p.logger.Warn("http shutdown", "error", err)
	}
	if disp != nil {
		// Stop bounds itself to about twice the grace; this is the last resort.
		dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*p.rt.shutdownGrace+10*time.Second)
		defer dcancel()
		if err := disp.Stop(dctx); err != nil {
			p.logger.Warn("dispatcher shutdown", "error", err)
		}
	}
	return serveErr
}
