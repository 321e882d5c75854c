package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
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
	"github.com/cairnrun/cairn/internal/tracing"
	"github.com/cairnrun/cairn/maintenance"
	"github.com/cairnrun/cairn/runtime"
	"github.com/cairnrun/cairn/secrets"
	"github.com/cairnrun/cairn/ui"
)

// shutdownGrace bounds how long in-flight HTTP requests may take to drain.
const shutdownGrace = 10 * time.Second

// defaultListen is the address serve and dev listen on by default: this machine only.
const defaultListen = "127.0.0.1:8080"

// runtimeFlags are the dispatcher settings shared by serve and dev.
type runtimeFlags struct {
	concurrency   int
	tags          []string
	leaseTTL      time.Duration
	inlineLimit   int64
	shutdownGrace time.Duration
	signingKey    string
	// secretKey seals secrets (CAIRN_SECRET_KEY); secretKeysOld only open them.
	secretKey     string
	secretKeysOld string
	noDispatcher  bool
	// demandPools are the tag sets of the pools whose demand /metrics reports
	// (cairn_pool_demand), as --demand-pools gives them.
	demandPools string
	cacheDir    string
	publicURL   string
	// execIsolation is bwrap or none; empty (cairn dev's default) means bwrap where
	// it works, else none with a warning.
	execIsolation isolationFlag
	execUID       int
	execCgroup    string
	// execMemory, execPids and execTmpBytes are the default bounds of sandboxed
	// exec handlers (functions.ExecConfig); 0: none.
	execMemory   int64
	execPids     int
	execTmpBytes int64
	// httpAllowLocal lets http steps call local addresses (serve: false; dev: true).
	httpAllowLocal bool
	// maxChildDepth, maxChildRuns and maxTreeRuns bound child runs (workflow steps).
	maxChildDepth int
	maxChildRuns  int
	maxTreeRuns   int
	// retention, archiveRuns, idempotencyTTL and auditRetention: retention.go.
	retention      retentionFlag
	archiveRuns    bool
	idempotencyTTL time.Duration
	auditRetention time.Duration
	// gcInterval, gcGrace, gcDryRun and cacheMaxBytes: gc.go.
	gcInterval    time.Duration
	gcGrace       time.Duration
	gcDryRun      bool
	cacheMaxBytes int64
}

// register adds the flags to fs with their defaults: serve's, or cairn dev's (a
// laptop may lack bubblewrap, and runs its http functions on itself).
func (f *runtimeFlags) register(fs *pflag.FlagSet, dev bool) {
	isolation, isolationDefault := isolationFlag(functions.IsolationBwrap), ""
	keyDefault, cacheDefault := "random per process", "$TMPDIR/cairn-cache"
	secretDefault := "none: secrets and webhooks answer 503 secret_key_missing"
	if dev {
		isolation, isolationDefault = "", "; default bwrap where it works, else none with a warning"
		keyDefault, cacheDefault = "made once, kept in <data-dir>/signing-key", "<data-dir>/cache"
		secretDefault = "made once, kept in <data-dir>/secret-key"
	}
	f.execIsolation = isolation
	fs.IntVar(&f.concurrency, "concurrency", runtime.DefaultConcurrency, "attempts run at once by this process's dispatcher")
	fs.StringSliceVar(&f.tags, "tags", nil, "this dispatcher's tags, comma-separated (gpu,billing): it also claims the steps whose runs_on it has all of")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", runtime.DefaultLeaseTTL, fmt.Sprintf("lease of a claimed step without heartbeat (at least %s)", runtime.MinLeaseTTL))
	fs.Int64Var(&f.inlineLimit, "inline-limit", runtime.DefaultInlineLimit, "largest output or checkpoint kept in the catalog row, in bytes")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", runtime.DefaultShutdownGrace, "how long running attempts may finish at shutdown before their leases are handed back")
	fs.StringVar(&f.signingKey, "signing-key", "", "HMAC key that signs requests to http functions, lease credentials and cursors; shared by every server (default "+keyDefault+")")
	fs.StringVar(&f.secretKey, "secret-key", "", "key that encrypts secrets at rest: 32 random bytes in base64 (openssl rand -base64 32), the same on every server (default "+secretDefault+")")
	fs.StringVar(&f.secretKeysOld, "secret-keys-old", "", "earlier secret keys, comma-separated: they only decrypt versions sealed before a key rotation")
	fs.BoolVar(&f.noDispatcher, "no-dispatcher", false, "serve the API only, run no dispatcher")
	fs.StringVar(&f.demandPools, "demand-pools", "", "tag sets of the pools whose demand /metrics reports as cairn_pool_demand, separated by ';' (gpu;gpu,cuda): every pool an autoscaler scales, so that a pool at zero servers still has its series; the untagged pool and this server's --tags are always reported")
	fs.StringVar(&f.publicURL, "public-url", "", "the API's URL as functions reach it, for checkpoint_url in envelopes (default http://<listen address>)")
	fs.StringVar(&f.cacheDir, "cache-dir", "", "folder for extracted bundles and downloaded inputs (default "+cacheDefault+")")
	fs.Var(&f.execIsolation, "exec-isolation", "how exec handlers are kept from the server: bwrap (a bubblewrap sandbox; exec steps are refused where it does not work) or none (unisolated, as the server's user; see docs/security.md)"+isolationDefault)
	fs.BoolVar(&f.httpAllowLocal, "http-allow-local", dev, "let http steps call loopback and link-local addresses (this machine, cloud instance credentials)")
	fs.IntVar(&f.execUID, "exec-uid", functions.DefaultSandboxUID, "uid and gid of sandboxed exec handlers when the server runs as root")
	fs.StringVar(&f.execCgroup, "exec-cgroup", "/sys/fs/cgroup", "the cgroup v2 mount where exec steps' resources are enforced with a cgroup per attempt, when the server's cgroup there is delegated (else rlimits); none: rlimits always")
	fs.Int64Var(&f.execMemory, "exec-memory", functions.DefaultMemoryBytes, "memory of a sandboxed exec handler whose step sets no resources.memory, in bytes; 0: no default")
	fs.IntVar(&f.execPids, "exec-pids", functions.DefaultPids, "processes and threads of a sandboxed exec handler whose step sets no resources.pids; 0: no default")
	fs.Int64Var(&f.execTmpBytes, "exec-tmp-bytes", functions.DefaultTempBytes, "bound of each file a sandboxed exec handler writes and, on a root server, of its HOME and TMPDIR together, in bytes; 0: none")
	fs.IntVar(&f.maxChildDepth, "max-child-depth", runtime.DefaultMaxChildDepth, "how deep child runs (workflow steps) may nest: a step that would start a deeper one fails with code child_limit")
	fs.IntVar(&f.maxChildRuns, "max-child-runs", runtime.DefaultMaxChildRuns, "most child runs the workflow steps of one run may start in all (code child_limit past it)")
	fs.IntVar(&f.maxTreeRuns, "max-tree-runs", runtime.DefaultMaxTreeRuns, "most child runs one tree of runs (a run without a parent and its descendants, at every depth) may hold in all (code child_limit past it)")
	bindEnv(fs, map[string]string{
		"concurrency":      "CAIRN_CONCURRENCY",
		"tags":             "CAIRN_TAGS",
		"lease-ttl":        "CAIRN_LEASE_TTL",
		"inline-limit":     "CAIRN_INLINE_LIMIT",
		"shutdown-grace":   "CAIRN_SHUTDOWN_GRACE",
		"signing-key":      "CAIRN_SIGNING_KEY",
		"secret-key":       "CAIRN_SECRET_KEY",
		"secret-keys-old":  "CAIRN_SECRET_KEYS_OLD",
		"public-url":       "CAIRN_PUBLIC_URL",
		"demand-pools":     "CAIRN_DEMAND_POOLS",
		"cache-dir":        "CAIRN_CACHE_DIR",
		"exec-isolation":   "CAIRN_EXEC_ISOLATION",
		"http-allow-local": "CAIRN_HTTP_ALLOW_LOCAL",
		"exec-uid":         "CAIRN_EXEC_UID",
		"exec-cgroup":      "CAIRN_EXEC_CGROUP",
		"exec-memory":      "CAIRN_EXEC_MEMORY",
		"exec-pids":        "CAIRN_EXEC_PIDS",
		"exec-tmp-bytes":   "CAIRN_EXEC_TMP_BYTES",
		"max-child-depth":  "CAIRN_MAX_CHILD_DEPTH",
		"max-child-runs":   "CAIRN_MAX_CHILD_RUNS",
		"max-tree-runs":    "CAIRN_MAX_TREE_RUNS",
	})
	// Issue 16 and the design spell it CAIRN_SECRETS_KEY.
	envAlias(fs, "secret-key", "CAIRN_SECRETS_KEY")
	f.registerRetention(fs)
	f.registerGC(fs)
}

// check refuses values that parse but cannot work.
func (f *runtimeFlags) check() error {
	switch {
	case f.concurrency < 1:
		return errors.New("--concurrency (CAIRN_CONCURRENCY) must be at least 1")
	case f.leaseTTL < runtime.MinLeaseTTL:
		return fmt.Errorf("--lease-ttl (CAIRN_LEASE_TTL) must be at least %s: heartbeats renew it every third", runtime.MinLeaseTTL)
	case f.inlineLimit < 1:
		return errors.New("--inline-limit (CAIRN_INLINE_LIMIT) must be at least 1")
	case f.shutdownGrace < 0:
		return errors.New("--shutdown-grace (CAIRN_SHUTDOWN_GRACE) must not be negative")
	case f.execMemory < 0 || f.execPids < 0 || f.execTmpBytes < 0:
		return errors.New("--exec-memory, --exec-pids and --exec-tmp-bytes (CAIRN_EXEC_MEMORY, CAIRN_EXEC_PIDS, CAIRN_EXEC_TMP_BYTES) must not be negative (0: no bound)")
	case f.maxChildDepth < 1:
		return errors.New("--max-child-depth (CAIRN_MAX_CHILD_DEPTH) must be at least 1")
	case f.idempotencyTTL < time.Minute:
		return errors.New("--idempotency-ttl (CAIRN_IDEMPOTENCY_TTL) must be at least 1m")
	case f.maxChildRuns < 1:
		return errors.New("--max-child-runs (CAIRN_MAX_CHILD_RUNS) must be at least 1")
	case f.maxTreeRuns < 1:
		return errors.New("--max-tree-runs (CAIRN_MAX_TREE_RUNS) must be at least 1")
	}
	for _, tag := range f.tags {
		if !bundle.ValidTag(tag) {
			return fmt.Errorf("--tags (CAIRN_TAGS): tag %q must be %s", tag, bundle.TagRule)
		}
	}
	if _, err := f.pools(); err != nil {
		return err
	}
	if _, err := secrets.ParseKeyring(f.secretKey, f.secretKeysOld); err != nil {
		return err
	}
	return nil
}

// pools returns the tag sets whose demand /metrics reports: the untagged pool,
// this server's tags, and those of --demand-pools ("gpu;gpu,cuda").
func (f *runtimeFlags) pools() ([][]string, error) {
	out := [][]string{nil, f.tags}
	for _, set := range strings.Split(f.demandPools, ";") {
		tags, bad := bundle.ParseTags(set)
		if bad != "" {
			return nil, fmt.Errorf("--demand-pools (CAIRN_DEMAND_POOLS): tag %q must be %s", bad, bundle.TagRule)
		}
		out = append(out, tags)
	}
	return out, nil
}

// isolationFlag is the value of --exec-isolation: bwrap, none, or empty for cairn
// dev's default (bwrap where it works, else none).
type isolationFlag string

// String implements pflag.Value.
func (f *isolationFlag) String() string { return string(*f) }

// Set implements pflag.Value: bwrap or none.
func (f *isolationFlag) Set(v string) error {
	iso, err := functions.ParseIsolation(v)
	if err != nil {
		return err
	}
	*f = isolationFlag(iso)
	return nil
}

// Type implements pflag.Value.
func (f *isolationFlag) Type() string { return "mode" }

// unbounded turns a bound flag's 0 (none) into ExecConfig's word for none, -1.
func unbounded(v int64) int64 {
	if v == 0 {
		return -1
	}
	return v
}

// newExecInvoker makes the exec invoker with the isolation rf asks for, and says at
// start-up how handlers will run.
func newExecInvoker(rf runtimeFlags, logger *slog.Logger) *functions.Exec {
	iso, fallback := functions.Isolation(rf.execIsolation), false
	if iso == "" {
		iso, fallback = functions.IsolationBwrap, true
	}
	cfg := &functions.ExecConfig{Logger: logger, Isolation: iso, SandboxUID: rf.execUID, CgroupRoot: rf.execCgroup,
		DefaultMemoryBytes: unbounded(rf.execMemory), DefaultPids: int(unbounded(int64(rf.execPids))), TempBytes: unbounded(rf.execTmpBytes)}
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
	return inv
}

// limitFlags bound what one server gives its clients (docs/operations.md,
// "Limits"); shared by serve and dev. Zero means the default; negative values are
// refused.
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

func (f *limitFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.maxConnections, "max-connections", api.DefaultMaxConnections, "HTTP connections open at once; more are answered 503 with Retry-After")
	fs.IntVar(&f.maxStreams, "max-streams", api.DefaultMaxStreams, "event streams (GET …/events/stream) open at once; more are answered 503 with Retry-After")
	fs.DurationVar(&f.idleTimeout, "idle-timeout", defaultIdleTimeout, "how long an idle keep-alive connection is kept open")
	fs.DurationVar(&f.bodyReadTimeout, "body-read-timeout", api.DefaultBodyReadTimeout, "window over which an upload (bundle, checkpoint) must arrive at --min-body-rate, or is cut")
	fs.Int64Var(&f.minBodyRate, "min-body-rate", api.DefaultMinBodyRate, "slowest upload rate accepted, in bytes per second, averaged over --body-read-timeout")
	fs.Int64Var(&f.maxCheckpointSize, "max-checkpoint-size", api.DefaultMaxCheckpointSize, "largest checkpoint accepted by PUT …/checkpoint, a callback or a signal, and read from an exec handler's checkpoint_file, in bytes")
	fs.IntVar(&f.maxSteps, "max-steps", bundle.DefaultMaxSteps, "most steps a deployed workflow may have")
	fs.StringVar(&f.metricsToken, "metrics-token", "", "bearer token GET /metrics requires (an admin token works too); empty: /metrics is open")
	bindEnv(fs, map[string]string{
		"max-connections":     "CAIRN_MAX_CONNECTIONS",
		"max-streams":         "CAIRN_MAX_STREAMS",
		"idle-timeout":        "CAIRN_IDLE_TIMEOUT",
		"body-read-timeout":   "CAIRN_BODY_READ_TIMEOUT",
		"min-body-rate":       "CAIRN_MIN_BODY_RATE",
		"max-checkpoint-size": "CAIRN_MAX_CHECKPOINT_SIZE",
		"max-steps":           "CAIRN_MAX_STEPS",
		"metrics-token":       "CAIRN_METRICS_TOKEN",
	})
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
		listenDBURL, poolMode  string
		tokensSpec, tokensFile string
		rf                     runtimeFlags
		lf                     limitFlags
		of                     oidcFlags
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
			pooling, err := transactionPooling(poolMode)
			if err != nil {
				return err
			}
			if pooling {
				logger.Info("CAIRN_DATABASE_POOL_MODE=transaction: no statement is prepared, each goes in one message", "listen_url_set", listenDBURL != "")
			}
			if err := errors.Join(rf.check(), lf.check()); err != nil {
				return err
			}
			if _, err := of.check(rf.publicURL); err != nil {
				return err
			}
			tokens, err := loadTokens(tokensSpec, tokensFile)
			if err != nil {
				return err
			}
			if tokens.Len() == 0 {
				logger.Warn("no tokens configured (CAIRN_TOKENS or CAIRN_TOKENS_FILE): every /v1 operation will answer 401")
			}
			if lf.metricsToken == "" {
				logger.Warn("no CAIRN_METRICS_TOKEN: /metrics is open to anyone who reaches the server")
			}
			store, blobs, err := openBackends(ctx, e, dbURL, blobURL, logger, rf.idempotencyTTL, pooling)
			if err != nil {
				return err
			}
			defer store.Close()
			if listenDBURL == "" {
				listenDBURL = dbURL
			}
			if rf.signingKey == "" {
				logger.Warn("no CAIRN_SIGNING_KEY: a random per-process key signs requests to http functions, lease credentials and callback URLs, which other servers and a restart of this one then refuse")
				rf.signingKey = newToken()
			}
			if rf.secretKey == "" {
				logger.Warn("no CAIRN_SECRET_KEY: PUT /v1/secrets and webhook deliveries will answer 503 secret_key_missing, and steps that reference secrets fail with code secret_not_found")
			}
			lambdaInvoker, err := newLambdaInvoker(ctx, e, logger)
			if err != nil {
				return err
			}
			return runServer(ctx, serverParts{listen: listen, dbURL: listenDBURL, store: store, blobs: blobs, tokens: tokens, logger: logger, rt: rf, limits: lf, oidc: of, lambda: lambdaInvoker, getenv: e}, nil)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", defaultListen, "address to serve HTTP on")
	f.StringVar(&dbURL, "database-url", "", "PostgreSQL URL")
	f.StringVar(&listenDBURL, "database-listen-url", "", "PostgreSQL URL for LISTEN, a direct connection when --database-url goes through a pooler in transaction mode (default --database-url)")
	f.StringVar(&poolMode, "database-pool-mode", "session", poolModeUsage)
	f.StringVar(&blobURL, "blobstore", "", "blob store URL: file:///path or s3://bucket?endpoint=http://host:9000&region=us-east-1")
	f.StringVar(&tokensSpec, "tokens", "", "bearer tokens as role:token,...")
	f.StringVar(&tokensFile, "tokens-file", "", "file of role:token lines")
	bindEnv(f, map[string]string{
		"listen":              "CAIRN_LISTEN",
		"database-url":        "CAIRN_DATABASE_URL",
		"database-listen-url": "CAIRN_DATABASE_LISTEN_URL",
		"database-pool-mode":  "CAIRN_DATABASE_POOL_MODE",
		"blobstore":           "CAIRN_BLOBSTORE",
		"tokens":              "CAIRN_TOKENS",
		"tokens-file":         "CAIRN_TOKENS_FILE",
	})
	rf.register(f, false)
	lf.register(f)
	of.register(f)
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

// poolModeUsage documents --database-pool-mode.
const poolModeUsage = "how the pooler in front of PostgreSQL, if any, lends its connections: session (or none), or transaction (PgBouncer's pool_mode=transaction: nothing is prepared, each statement goes in one message)"

// transactionPooling reads --database-pool-mode: whether the database URL goes
// through a pooler in transaction mode.
func transactionPooling(mode string) (bool, error) {
	switch mode {
	case "", "session":
		return false, nil
	case "transaction":
		return true, nil
	}
	return false, fmt.Errorf("--database-pool-mode (CAIRN_DATABASE_POOL_MODE) %q: want session or transaction", mode)
}

// openStore opens the catalog at url; idempotencyTTL 0 is the default; pooling
// says url goes through a pooler in transaction mode.
func openStore(ctx context.Context, url string, logger *slog.Logger, idempotencyTTL time.Duration, pooling bool) (*catalog.Store, error) {
	if url == "" {
		return nil, errors.New("no database: set --database-url or CAIRN_DATABASE_URL")
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	return catalog.Open(ctx, url, &catalog.Config{Logger: logger, IdempotencyTTL: idempotencyTTL, TransactionPooling: pooling, BinaryVersion: binaryVersion()})
}

// openBackends opens what a server works on: the catalog at dbURL, checked to be
// at the binary's schema, and the blob store at blobURL. The caller closes the
// store.
func openBackends(ctx context.Context, e env, dbURL, blobURL string, logger *slog.Logger,
	idempotencyTTL time.Duration, pooling bool) (*catalog.Store, blobstore.Store, error) {
	store, err := openStore(ctx, dbURL, logger, idempotencyTTL, pooling)
	if err != nil {
		return nil, nil, err
	}
	if err := store.CheckSchema(ctx); err != nil {
		_ = store.Close()
		return nil, nil, err
	}
	blobs, err := blobstore.Open(ctx, blobURL, e)
	if err != nil {
		_ = store.Close()
		return nil, nil, fmt.Errorf("open blob store: %w", err)
	}
	return store, blobs, nil
}

// serverParts is what runServer runs.
type serverParts struct {
	listen string
	// dbURL is the database to LISTEN on (a direct connection); "" polls only.
	dbURL  string
	store  *catalog.Store
	blobs  blobstore.Store
	tokens *api.Tokens
	logger *slog.Logger
	rt     runtimeFlags
	limits limitFlags
	oidc   oidcFlags         // single sign-on and OIDC bearers (serve only)
	lambda functions.Invoker // nil: no lambda steps here (see newLambdaInvoker)
	// getenv reads the OTEL_* variables (traces); nil: none.
	getenv func(string) string
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

// runServer runs the dispatcher with its housekeeping services (newMaintenance) and
// serves the API until ctx ends, then drains HTTP for at most shutdownGrace, stops
// the services and stops the dispatcher (running attempts get their grace, then their
// leases are handed back). onListen, when set, is called with the bound
// address once the listener is open.
func runServer(ctx context.Context, p serverParts, onListen func(addr string)) error {
	pools, err := p.rt.pools()
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		runtime.NewCatalogGauges(p.store, p.logger), runtime.NewPoolDemand(p.store, pools, p.logger))

	getenv := p.getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	tracer, err := tracing.New(ctx, getenv)
	if err != nil {
		return err
	}
	if tracer != nil {
		p.logger.Info("tracing: exporting spans over OTLP/HTTP")
		defer func() {
			tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := tracer.Shutdown(tctx); err != nil {
				p.logger.Warn("tracing shutdown", "error", err)
			}
		}()
	}

	ln, err := net.Listen("tcp", p.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", p.listen, err)
	}
	secretKeys, err := secrets.ParseKeyring(p.rt.secretKey, p.rt.secretKeysOld)
	if err != nil {
		ln.Close()
		return err
	}
	addr := ln.Addr().String()
	publicURL := p.rt.publicURL
	if publicURL == "" {
		publicURL = "http://" + addr
	}
	var disp *runtime.Dispatcher
	var housekeeping maintenance.Group // beside the dispatcher, none without it
	var capabilities func() map[string]string
	if !p.rt.noDispatcher {
		execInvoker := newExecInvoker(p.rt, p.logger)
		rtc := &runtime.Config{
			Concurrency:   p.rt.concurrency,
			Tags:          p.rt.tags,
			LeaseTTL:      p.rt.leaseTTL,
			ShutdownGrace: p.rt.shutdownGrace,
			DatabaseURL:   p.dbURL,
			Logger:        p.logger,
			Registerer:    reg,
			Tracer:        tracer,
			Handlers: runtime.HandlerConfig{CacheDir: p.rt.cacheDir,
				CacheMaxBytes: p.rt.cacheMaxBytesConfig(),
				SigningKey:    []byte(p.rt.signingKey),
				Secrets:       secrets.NewVault(p.store, secretKeys),
				PublicURL:     publicURL,
				Invokers: map[bundle.Kind]functions.Invoker{
					bundle.KindExec:   execInvoker,
					bundle.KindHTTP:   functions.NewHTTP(&functions.HTTPConfig{SigningKey: []byte(p.rt.signingKey), Logger: p.logger, AllowLocal: p.rt.httpAllowLocal}),
					bundle.KindLambda: p.lambda,
				},
			},
			Limits: runtime.Limits{InlineLimit: p.rt.inlineLimit,
				MaxChildDepth: p.rt.maxChildDepth,
				MaxChildRuns:  p.rt.maxChildRuns,
				MaxTreeRuns:   p.rt.maxTreeRuns,
			},
		}
		// The API's limit of PUT …/checkpoint bounds the files handlers name too.
		rtc.Limits.MaxCheckpointSize = p.limits.maxCheckpointSize
		disp, err = runtime.New(p.store, p.blobs, rtc)
		if err != nil {
			ln.Close()
			return err
		}
		capabilities = disp.Capabilities
		if housekeeping, err = newMaintenance(p.store, p.blobs, disp, p.rt, p.logger, reg, tracer); err != nil {
			ln.Close()
			return err
		}
	}

	sso, err := p.oidc.setup(ctx, p.rt.publicURL, p.logger)
	if err != nil {
		ln.Close()
		return err
	}
	var bearers api.BearerVerifier // a nil *OIDCBearers would be a non-nil interface
	if sso.bearers != nil {
		bearers = sso.bearers
	}
	lim := p.limits
	srv := api.New(p.store, p.blobs, &api.Config{
		Logger: p.logger, Tokens: p.tokens, Bearers: bearers, Registry: reg, Tracer: tracer,
		SigningKey: []byte(p.rt.signingKey), InlineLimit: p.rt.inlineLimit,
		MetricsToken: lim.metricsToken, MaxCheckpointSize: lim.maxCheckpointSize, MaxStreams: lim.maxStreams,
		BodyReadTimeout: lim.bodyReadTimeout, MinBodyRate: lim.minBodyRate,
		BundleLimits: bundle.Limits{MaxSteps: lim.maxSteps},
		Capabilities: capabilities,
		SecretKeys:   secretKeys,
	})
	if err := mountUI(srv, p.tokens, p.store, sso.sso, p.logger); err != nil {
		ln.Close()
		return err
	}
	if disp != nil {
		if err := disp.Start(ctx); err != nil {
			ln.Close()
			return err
		}
		if err := housekeeping.Start(ctx); err != nil {
			ln.Close()
			_ = disp.Stop(context.WithoutCancel(ctx))
			return err
		}
	}
	httpSrv := newHTTPServer(srv.Handler(), lim, p.logger)
	httpSrv.RegisterOnShutdown(srv.CloseStreams)
	limited := api.LimitConnections(ln, lim.maxConnections, &api.ConnLimitConfig{Server: httpSrv, Metrics: srv.Metrics(), Logger: p.logger})
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
		if err := housekeeping.Stop(dctx); err != nil {
			p.logger.Warn("housekeeping shutdown", "error", err)
		}
		if err := disp.Stop(dctx); err != nil {
			p.logger.Warn("dispatcher shutdown", "error", err)
		}
	}
	return serveErr
}

// mountUI serves the web UI under /ui (and sends / there), calling the API in
// process as each session's user; its sessions are kept in the catalog. sso,
// when set, offers single sign-on.
func mountUI(srv *api.Server, tokens *api.Tokens, sessions ui.Sessions, sso *ui.SSOConfig, logger *slog.Logger) error {
	h, err := ui.New(srv.Handler(), tokens, sessions, &ui.Config{Logger: logger, SSO: sso, Identities: srv})
	if err != nil {
		return fmt.Errorf("web UI: %w", err)
	}
	srv.Mount(ui.Prefix+"/", h)
	srv.Mount("GET "+ui.Prefix, h)
	srv.Mount("GET /{$}", http.RedirectHandler(ui.Prefix+"/", http.StatusSeeOther))
	return nil
}
