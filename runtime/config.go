package runtime

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/bundle"
	"github.com/cairnrun/cairn/functions"
)

// Blobs is what the runtime needs of the blob store.
type Blobs interface {
	Put(ctx context.Context, kind string, r io.Reader, opts blobstore.PutOptions) (blobstore.Object, error)
	Get(ctx context.Context, key string, opts blobstore.GetOptions) (io.ReadCloser, blobstore.Object, error)
	PresignGet(ctx context.Context, key string, expiry time.Duration) (string, error)
}

// Config tunes a Dispatcher. A nil *Config means all defaults.
type Config struct {
	// ID names this dispatcher in leases and attempts; default host-pid-random.
	ID string
	// Concurrency is how many attempts run at once; default 128. Short steps need a
	// high value: claims and group commits batch what is free or finished at once.
	Concurrency int
	// ClaimBatch bounds the steps claimed per round trip; default 64.
	ClaimBatch int
	// LeaseTTL is how long a claim lasts without a heartbeat; heartbeats extend it
	// every LeaseTTL/3. Default 30s.
	LeaseTTL time.Duration
	// PollInterval is how often the dispatcher looks for work when no notification
	// arrives (notifications are hints; polling guarantees progress). Default 1s.
	PollInterval time.Duration
	// SweepInterval is how often expired leases are swept; default LeaseTTL/2.
	SweepInterval time.Duration
	// InlineLimit is the largest output or checkpoint kept in the catalog row;
	// larger ones go to the blob store. Default 256 KiB.
	InlineLimit int64
	// ShutdownGrace is how long Stop lets running attempts finish before handing
	// their leases back; default 10s.
	ShutdownGrace time.Duration
	// CacheDir holds extracted bundles and downloaded inputs; default
	// $TMPDIR/cairn-cache.
	CacheDir string
	// DatabaseURL, when set, is used to LISTEN for notifications (new work, cancels);
	// without it the dispatcher polls only, and cancels reach it through heartbeats.
	DatabaseURL string
	// Invokers by function kind; default builtin and exec. http needs a signing key
	// (see functions.NewHTTP) and lambda an AWS configuration, so the caller adds them.
	Invokers map[bundle.Kind]functions.Invoker
	// SigningKey signs the lease credentials handed to http and lambda handlers for
	// PUT …/checkpoint (see functions.LeaseCredential); the API verifies them with the
	// same key. Default none: such handlers then get no credential.
	SigningKey []byte
	// PublicURL is the API's address as handlers reach it ("http://host:8080"), for
	// the envelope's checkpoint_url; default none.
	PublicURL string
	// PresignExpiry is how long presigned input URLs for http and lambda handlers
	// live; default 1h.
	PresignExpiry time.Duration
	// MaxLogSize caps the stored log of one attempt; default 16 MiB.
	MaxLogSize int64
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the dispatcher's Prometheus metrics; default none.
	Registerer prometheus.Registerer
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
		out.Concurrency = 128
	}
	if out.ClaimBatch <= 0 {
		out.ClaimBatch = 64
	}
	if out.LeaseTTL <= 0 {
		out.LeaseTTL = 30 * time.Second
	}
	if out.LeaseTTL < 300*time.Millisecond {
		return out, errors.New("runtime config: lease TTL under 300ms leaves no time for heartbeats")
	}
	if out.PollInterval <= 0 {
		out.PollInterval = time.Second
	}
	if out.SweepInterval <= 0 {
		out.SweepInterval = out.LeaseTTL / 2
	}
	if out.InlineLimit <= 0 {
		out.InlineLimit = 256 << 10
	}
	if out.ShutdownGrace <= 0 {
		out.ShutdownGrace = 10 * time.Second
	}
	if out.CacheDir == "" {
		out.CacheDir = filepath.Join(os.TempDir(), "cairn-cache")
	}
	if out.PresignExpiry <= 0 {
		out.PresignExpiry = time.Hour
	}
	if out.MaxLogSize <= 0 {
		out.MaxLogSize = 16 << 20
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	if out.Invokers == nil {
		out.Invokers = map[bundle.Kind]functions.Invoker{}
	}
	return out, nil
}
