package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/functions"
	"github.com/cairnrun/cairn/internal/tracing"
)

// Blobs is what the runtime needs of the blob store.
type Blobs interface {
	Put(ctx context.Context, kind string, r io.Reader, opts blobstore.PutOptions) (blobstore.Object, error)
	Get(ctx context.Context, key string, opts blobstore.GetOptions) (io.ReadCloser, blobstore.Object, error)
	PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error)
}

// Defaults of Config, exported so that the command line and the API show and use the
// same values.
const (
	DefaultConcurrency   = 128
	DefaultClaimBatch    = 64
	DefaultLeaseTTL      = 30 * time.Second
	DefaultPollInterval  = time.Second
	DefaultInlineLimit   = blobstore.DefaultInlineLimit
	DefaultShutdownGrace = 10 * time.Second
	// DefaultStartLatencyTarget is Config.StartLatencyTarget's default.
	DefaultStartLatencyTarget = time.Second
	DefaultPresignExpiry      = time.Hour
	DefaultMaxLogSize         = 16 << 20
	// DefaultMaxCheckpointSize is Config.MaxCheckpointSize's default, the same as
	// the API's (api.DefaultMaxCheckpointSize): cairn serve passes one value,
	// CAIRN_MAX_CHECKPOINT_SIZE, to both.
	DefaultMaxCheckpointSize = 256 << 20
	// DefaultLiveLogInterval is Config.LiveLogInterval's default.
	DefaultLiveLogInterval = time.Second
	// DefaultLiveLogTail is Config.LiveLogTail's default.
	DefaultLiveLogTail = 1 << 20
	// liveLogBatch is how many bytes of a running attempt's log make the
	// dispatcher publish them before LiveLogInterval is up.
	liveLogBatch = 64 << 10
	// DefaultMaxChildDepth bounds how deep child runs nest (Config.MaxChildDepth).
	DefaultMaxChildDepth = 8
	// DefaultMaxChildRuns bounds the child runs one run starts (Config.MaxChildRuns).
	DefaultMaxChildRuns = 10000
	// DefaultMaxTreeRuns bounds the child runs of one tree of runs, at every depth
	// (Config.MaxTreeRuns).
	DefaultMaxTreeRuns = 10000
)

// MinLeaseTTL is the shortest Config.LeaseTTL: a shorter lease leaves no time for
// heartbeats (every LeaseTTL/3).
const MinLeaseTTL = 300 * time.Millisecond

// Config tunes a Dispatcher. A nil *Config means all defaults. The server's
// housekeeping (retention, the blob collector, schedules, bulk operations, span
// export, the registry) is tuned by the configs of package maintenance.
type Config struct {
	// ID names this dispatcher in leases and attempts; default host-pid-random.
	ID string
	// Concurrency is how many attempts run at once; default DefaultConcurrency
	// (128). Short steps need a high value: claims and group commits batch what is
	// free or finished at once.
	Concurrency int
	// Tags are this dispatcher's (cairn serve --tags): it claims the steps whose
	// runs_on it has all of, and the steps without runs_on.
	Tags []string
	// ClaimBatch bounds the steps claimed per round trip; default DefaultClaimBatch
	// (64).
	ClaimBatch int
	// LeaseTTL is how long a claim lasts without a heartbeat; heartbeats extend it
	// every LeaseTTL/3. Default DefaultLeaseTTL (30s); at least MinLeaseTTL.
	LeaseTTL time.Duration
	// PollInterval is how often the dispatcher looks for work when no notification
	// arrives (notifications are hints; polling guarantees progress). Default
	// DefaultPollInterval (1s).
	PollInterval time.Duration
	// SweepInterval is how often expired leases are swept; default LeaseTTL/2.
	SweepInterval time.Duration
	// ShutdownGrace is how long Stop lets running attempts finish before handing
	// their leases back; default DefaultShutdownGrace (10s).
	ShutdownGrace time.Duration
	// StartLatencyTarget is how long an attempt may take from its claim to the
	// start of its handler before the dispatcher runs fewer attempts at once
	// (admission.go); default DefaultStartLatencyTarget (1s).
	StartLatencyTarget time.Duration
	// DatabaseURL, when set, is used to LISTEN for notifications (new work, cancels);
	// without it the dispatcher polls only, and cancels reach it through heartbeats.
	DatabaseURL string
	// Handlers says how attempts reach their handlers: invokers, credentials,
	// secrets, the bundle cache.
	Handlers HandlerConfig
	// Limits bound what one attempt or run may store or start.
	Limits Limits
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the dispatcher's Prometheus metrics; default none.
	Registerer prometheus.Registerer
	// Tracer records spans of attempts, steps and runs (internal/tracing); default
	// nil, no tracing, at the cost of a nil check per attempt.
	Tracer *tracing.Tracer
}

// HandlerConfig is how a dispatcher's attempts reach their handlers (Config.Handlers).
type HandlerConfig struct {
	// CacheDir holds extracted bundles and downloaded inputs; default
	// $TMPDIR/cairn-cache.
	CacheDir string
	// Invokers by function kind; default builtin and exec. http needs a signing key
	// (see functions.NewHTTP) and lambda an AWS configuration, so the caller adds them.
	Invokers map[bundle.Kind]functions.Invoker
	// SigningKey signs the lease credentials handed to http and lambda handlers for
	// PUT …/checkpoint (see functions.LeaseCredential); the API verifies them with the
	// same key. Default none: such handlers then get no credential.
	SigningKey []byte
	// Secrets reveals the secrets that steps reference in env and http headers
	// (secrets.Vault); nil: such steps fail with code secret_not_found.
	Secrets SecretSource
	// PublicURL is the API's address as handlers reach it ("http://host:8080"), for
	// the envelope's checkpoint_url; default none.
	PublicURL string
	// PresignExpiry is how long presigned input URLs for http and lambda handlers
	// live; default DefaultPresignExpiry (1h).
	PresignExpiry time.Duration
	// CacheMaxBytes caps the size of CacheDir (extracted bundles and
	// downloaded blobs): past it, the entries used least recently and not in
	// use by an attempt are removed. Default DefaultCacheMaxBytes (10 GiB);
	// negative: no cap.
	CacheMaxBytes int64
}

// Limits bound what one attempt or run may store or start (Config.Limits).
type Limits struct {
	// InlineLimit is the largest output or checkpoint kept in the catalog row;
	// larger ones go to the blob store. Default DefaultInlineLimit (256 KiB).
	InlineLimit int64
	// MaxLogSize caps the stored log of one attempt; default DefaultMaxLogSize
	// (16 MiB).
	MaxLogSize int64
	// MaxCheckpointSize bounds a checkpoint an exec handler stores from a file
	// (checkpoint_file on fd 3), counted in bytes read, not by the file's size:
	// past it the attempt fails, terminally, with code
	// functions.CodeCheckpointTooLarge and nothing is stored. Default
	// DefaultMaxCheckpointSize (256 MiB).
	MaxCheckpointSize int64
	// LiveLogInterval is how often a running attempt's new log bytes are published
	// to the catalog, where any API server reads them (the live tail); they are
	// also published whenever 64 KiB are waiting. Default DefaultLiveLogInterval
	// (1s).
	LiveLogInterval time.Duration
	// LiveLogTail is how much of the end of a running attempt's log the catalog
	// keeps for its live tail (older bytes are dropped; the whole log, up to
	// MaxLogSize, is stored when the attempt ends). Default DefaultLiveLogTail
	// (1 MiB).
	LiveLogTail int64
	// MaxChildDepth bounds how many ancestors a child run may have (its parent, the
	// parent's parent, …): a workflow step that would start a deeper one fails with
	// code child_limit. Default DefaultMaxChildDepth (8).
	MaxChildDepth int
	// MaxChildRuns bounds how many child runs the workflow steps of one run may
	// start in all (code child_limit past it). Default DefaultMaxChildRuns (10000).
	MaxChildRuns int
	// MaxTreeRuns bounds how many child runs one tree of runs may hold in all (the
	// descendants of a run without a parent, at every depth: a workflow that starts
	// itself twice grows its tree exponentially within MaxChildDepth): a workflow
	// step that would start one more fails with code child_limit. Default
	// DefaultMaxTreeRuns (10000).
	MaxTreeRuns int
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.ID == "" {
		host, _ := os.Hostname()
		var b [3]byte
		_, _ = rand.Read(b[:])
		out.ID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
	if out.Concurrency <= 0 {
		out.Concurrency = DefaultConcurrency
	}
	for _, tag := range out.Tags {
		if !bundle.ValidTag(tag) {
			return out, fmt.Errorf("runtime config: tag %q: a tag is 1 to 63 of a-z, 0-9, '_', '.', '-', starting with a letter or digit", tag)
		}
	}
	out.Tags = slices.Compact(slices.Sorted(slices.Values(out.Tags)))
	if out.ClaimBatch <= 0 {
		out.ClaimBatch = DefaultClaimBatch
	}
	if out.LeaseTTL <= 0 {
		out.LeaseTTL = DefaultLeaseTTL
	}
	if out.LeaseTTL < MinLeaseTTL {
		return out, fmt.Errorf("runtime config: a lease TTL under %s leaves no time for heartbeats", MinLeaseTTL)
	}
	if out.PollInterval <= 0 {
		out.PollInterval = DefaultPollInterval
	}
	if out.SweepInterval <= 0 {
		out.SweepInterval = out.LeaseTTL / 2
	}
	if out.Limits.InlineLimit <= 0 {
		out.Limits.InlineLimit = DefaultInlineLimit
	}
	if out.StartLatencyTarget <= 0 {
		out.StartLatencyTarget = DefaultStartLatencyTarget
	}
	if out.ShutdownGrace <= 0 {
		out.ShutdownGrace = DefaultShutdownGrace
	}
	if out.Handlers.CacheDir == "" {
		out.Handlers.CacheDir = filepath.Join(os.TempDir(), "cairn-cache")
	}
	if out.Handlers.PresignExpiry <= 0 {
		out.Handlers.PresignExpiry = DefaultPresignExpiry
	}
	if out.Limits.MaxLogSize <= 0 {
		out.Limits.MaxLogSize = DefaultMaxLogSize
	}
	if out.Limits.MaxCheckpointSize <= 0 {
		out.Limits.MaxCheckpointSize = DefaultMaxCheckpointSize
	}
	if out.Limits.LiveLogInterval <= 0 {
		out.Limits.LiveLogInterval = DefaultLiveLogInterval
	}
	if out.Limits.LiveLogTail <= 0 {
		out.Limits.LiveLogTail = DefaultLiveLogTail
	}
	if out.Limits.MaxChildDepth <= 0 {
		out.Limits.MaxChildDepth = DefaultMaxChildDepth
	}
	if out.Limits.MaxChildRuns <= 0 {
		out.Limits.MaxChildRuns = DefaultMaxChildRuns
	}
	if out.Limits.MaxTreeRuns <= 0 {
		out.Limits.MaxTreeRuns = DefaultMaxTreeRuns
	}
	if out.Handlers.CacheMaxBytes == 0 {
		out.Handlers.CacheMaxBytes = DefaultCacheMaxBytes
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Handlers.Invokers == nil {
		out.Handlers.Invokers = map[bundle.Kind]functions.Invoker{}
	}
	return out, nil
}

// SecretSource reveals a secret's newest value (secrets.Vault implements it).
type SecretSource interface {
	Reveal(ctx context.Context, name string) (value []byte, version int, err error)
}
