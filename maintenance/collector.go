package maintenance

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/cairnrun/cairn/blobstore"
	"github.com/cairnrun/cairn/catalog"
)

// Defaults of the blob garbage collector (CollectorConfig).
const (
	// DefaultGCInterval is how often a pass runs, across all servers.
	DefaultGCInterval = time.Hour
	// DefaultGCGrace is the age under which an object is never collected.
	DefaultGCGrace = 24 * time.Hour
	// DefaultGCBatch is how many objects one sweep transaction deletes at most:
	// it holds an advisory lock per object until it commits.
	DefaultGCBatch = 1000
	// gcDeleteConcurrency is how many deletes of one sweep run at once.
	gcDeleteConcurrency = 8
	// gcLeaseTTL is how long the collector's lease lasts without renewal; a
	// pass renews it at least every gcLeaseTTL/3.
	gcLeaseTTL = 10 * time.Minute
	// gcClaimsBatch bounds the expired claims one statement deletes.
	gcClaimsBatch = 1000
)

// collectedKinds are the kinds of objects the collector deletes. Archives
// (blobstore.KindArchives) are kept: they are what remains of deleted runs.
var collectedKinds = []string{blobstore.KindPayloads, blobstore.KindLogs, blobstore.KindBundles}

// CollectorBlobs is what the collector needs of the blob store; FileStore and
// S3Store have it.
type CollectorBlobs interface {
	blobstore.Lister
	Delete(ctx context.Context, key string) error
}

// CollectorConfig tunes a Collector. A nil *CollectorConfig means defaults.
type CollectorConfig struct {
	// Grace is the age under which an object, or a claim of its key, keeps it:
	// it must be longer than the longest upload and than the time between a
	// writer's claim (catalog.Store.BlobClaim) and the commit of the row that
	// names the object. The temporary objects and multipart uploads of crashed
	// Puts older than it are removed too. Default DefaultGCGrace (24h).
	Grace time.Duration
	// Interval is the shortest time between the end of a pass and the start of
	// the next, across all servers (their collectors share a lease in the
	// catalog); a pass called earlier is skipped unless forced. Default
	// DefaultGCInterval (1h).
	Interval time.Duration
	// DryRun: passes delete nothing and report what they would delete.
	// Default false.
	DryRun bool
	// Batch bounds the objects one sweep transaction deletes; default
	// DefaultGCBatch (1000).
	Batch int
	// Owner names this collector in the lease; default host-pid-random. Two
	// collectors must not share one.
	Owner string
	// Logger; default discard.
	Logger *slog.Logger
	// Registerer receives the collector's metrics; default none.
	Registerer prometheus.Registerer
}

// GCReport is what one pass of the collector found, and deleted (or, in a dry
// run, would delete).
type GCReport struct {
	// DryRun: nothing was deleted; the counts are what would have been.
	DryRun bool `json:"dry_run"`
	// Skipped: the pass did not run, because another server's pass holds the
	// lease or the last pass ended less than the interval ago.
	Skipped bool `json:"skipped,omitempty"`
	// ScannedObjects and ScannedBytes count the objects of the collected kinds
	// listed.
	ScannedObjects int   `json:"scanned_objects"`
	ScannedBytes   int64 `json:"scanned_bytes"`
	// DeletedObjects and DeletedBytes count the unreferenced objects deleted,
	// by kind in ByKind.
	DeletedObjects int                  `json:"deleted_objects"`
	DeletedBytes   int64                `json:"deleted_bytes"`
	ByKind         map[string]KindCount `json:"by_kind,omitempty"`
	// Temp counts the leftovers of crashed Puts removed.
	Temp blobstore.TempReport `json:"temp"`
	// ClaimsExpired counts the claims older than the grace deleted.
	ClaimsExpired int `json:"claims_expired"`
}

// KindCount is a number of objects and their bytes.
type KindCount struct {
	Objects int   `json:"objects"`
	Bytes   int64 `json:"bytes"`
}

// Collector is the blob garbage collector: a pass deletes the objects of kinds
// payloads, logs and bundles that no catalog row names, that are older than the
// grace period and whose key was not claimed within it, and the temporary
// objects and incomplete multipart uploads older than the grace period.
//
// A pass marks (catalog.Store.BlobRefs: one scan of every row that may name
// an object, kept in memory as a Bloom filter of the keys, markSet), lists
// each kind, and sweeps the old unmarked objects in batches
// (catalog.Store.BlobSweep), which checks their claims again under locks that
// claims wait for: the race with writers that find their content already
// stored is closed there (see catalog/blob_gc.go), with a few index reads a
// batch, not another scan of the catalog. One pass runs at a time across
// servers (a lease row in the catalog); a pass that lost it sweeps nothing
// more.
//
// Create it with NewCollector. Every server runs one with Start and Stop (a pass
// tried every quarter of Interval), and `cairn gc` runs one pass with Collect. It
// is safe for concurrent use.
type Collector struct {
	loop
	store   *catalog.Store
	blobs   CollectorBlobs
	cfg     CollectorConfig
	logger  *slog.Logger
	metrics *gcMetrics
	// lastMarked is the keys the last pass's mark found: the next sizes its
	// filter for at least as many.
	lastMarked atomic.Int64
}

// NewCollector returns a collector of blobs against store's references. It
// returns an error for a negative Grace or Interval.
func NewCollector(store *catalog.Store, blobs CollectorBlobs, cfg *CollectorConfig) (*Collector, error) {
	var c CollectorConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Grace < 0 || c.Interval < 0 {
		return nil, errors.New("collector config: negative grace or interval")
	}
	if c.Grace == 0 {
		c.Grace = DefaultGCGrace
	}
	if c.Interval == 0 {
		c.Interval = DefaultGCInterval
	}
	if c.Batch <= 0 {
		c.Batch = DefaultGCBatch
	}
	if c.Owner == "" {
		// Unique to this collector: two passes under one name could share the
		// lease, and one's expiry of claims could outrun the other's sweeps.
		c.Owner = newOwner()
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{loop: loop{name: "blob collector"}, store: store, blobs: blobs, cfg: c,
		logger: c.Logger.With("component", "blob_gc"), metrics: newGCMetrics(c.Registerer)}, nil
}

// Start runs the collector's passes until Stop: it tries every quarter of Interval
// (jittered), and the catalog's lease lets one pass run at a time across servers,
// Interval after the last one ended.
func (c *Collector) Start(ctx context.Context) error {
	return c.start(ctx, func(ctx context.Context) {
		for idle(ctx, c.cfg.Interval/4) {
			rep, err := c.Collect(ctx, false)
			if err != nil {
				if ctx.Err() == nil {
					c.logger.Warn("blob collector pass failed", "error", err)
				}
				continue
			}
			if !rep.Skipped {
				c.logger.Info("blob collector pass", "dry_run", rep.DryRun, "scanned", rep.ScannedObjects,
					"deleted", rep.DeletedObjects, "deleted_bytes", rep.DeletedBytes,
					"temp_objects", rep.Temp.Objects, "incomplete_uploads", rep.Temp.Uploads)
			}
		}
	})
}

// Stop ends the passes (one under way is canceled and releases its lease) and
// waits for them, or for ctx.
func (c *Collector) Stop(ctx context.Context) error { return c.stop(ctx) }

// Collect runs one pass now and reports it. With force, it does not wait for
// the interval since the last pass (but still for another server's pass to
// end: Skipped). An error ends the pass early; the report holds what was done
// before it.
func (c *Collector) Collect(ctx context.Context, force bool) (GCReport, error) {
	rep := GCReport{DryRun: c.cfg.DryRun, ByKind: map[string]KindCount{}}
	interval := c.cfg.Interval
	if force {
		interval = 0
	}
	ok, err := c.store.BlobGCTake(ctx, c.cfg.Owner, gcLeaseTTL, interval)
	if err != nil {
		c.metrics.passes.WithLabelValues("failed").Inc()
		return rep, err
	}
	if !ok {
		rep.Skipped = true
		c.metrics.passes.WithLabelValues("skipped").Inc()
		return rep, nil
	}
	err = c.collect(ctx, &rep)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if rerr := c.store.BlobGCRelease(rctx, c.cfg.Owner, err == nil); rerr != nil && err == nil {
		err = rerr
	}
	switch {
	case err != nil:
		c.metrics.passes.WithLabelValues("failed").Inc()
	case c.cfg.DryRun:
		c.metrics.passes.WithLabelValues("dry_run").Inc()
	default:
		c.metrics.passes.WithLabelValues("done").Inc()
	}
	return rep, err
}

func (c *Collector) collect(ctx context.Context, rep *GCReport) error {
	lastRenew := time.Now()
	renew := func() error {
		if time.Since(lastRenew) < gcLeaseTTL/3 {
			return nil
		}
		lastRenew = time.Now()
		return c.store.BlobGCRenew(ctx, c.cfg.Owner, gcLeaseTTL)
	}
	cutoff := time.Now().Add(-c.cfg.Grace)

	temp, err := c.blobs.CleanTemp(ctx, cutoff, c.cfg.DryRun)
	rep.Temp = temp
	if !c.cfg.DryRun {
		c.metrics.reclaim("tmp", temp.Objects, temp.Bytes)
		c.metrics.reclaim("multipart", temp.Uploads, temp.UploadBytes)
	}
	if err != nil {
		if ctx.Err() != nil {
			return err
		}
		// A server without multipart listings, say, should not stop the
		// collection of what rows no longer name.
		c.logger.Warn("clean temporary objects and incomplete uploads failed; collecting the rest", "error", err)
	}

	// Mark. The listing below starts after this snapshot: an object stored
	// since is younger than the grace anyway. A row committed after the mark
	// names an object its writer claimed within the grace before it committed,
	// or copied from a row that the mark saw or that was committed after it,
	// so the sweep keeps the claims made since the mark's start less the
	// grace, however long the pass takes (catalog/blob_gc.go), and the claims
	// expire only once the sweeps are done.
	markStart := time.Now()
	hint, err := c.store.BlobRefsSizeHint(ctx)
	if err != nil {
		return err
	}
	marked := newMarkSet(max(hint, c.lastMarked.Load()))
	if err := c.store.BlobRefs(ctx, c.cfg.Grace, func(key string) {
		if k, ok := toMarkKey(key); ok {
			marked.add(k)
		}
	}); err != nil {
		return err
	}
	c.lastMarked.Store(int64(marked.n))
	if fp := marked.falsePositiveRate(); fp > 5*gcMarkFalsePositives {
		// Stale statistics (a restored database not analyzed yet, say): this
		// pass keeps more garbage; the next one sizes its filter by this count.
		c.logger.Warn("the mark found more keys than its filter was sized for: this pass keeps more garbage than usual",
			"keys", marked.n, "filter_bytes", marked.bytes(), "false_positive_rate", fp)
	} else {
		c.logger.Debug("marked", "keys", marked.n, "filter_bytes", marked.bytes(), "false_positive_rate", fp)
	}
	if err := renew(); err != nil {
		return err
	}

	// Sweep, kind by kind, in batches.
	for _, kind := range collectedKinds {
		var batch []blobstore.Listed
		for obj, err := range c.blobs.List(ctx, kind) {
			if err != nil {
				return err
			}
			rep.ScannedObjects++
			rep.ScannedBytes += obj.Size
			c.metrics.scannedObjects.Inc()
			c.metrics.scannedBytes.Add(float64(obj.Size))
			if k, ok := toMarkKey(obj.Key); !ok || !obj.ModTime.Before(cutoff) {
				continue
			} else if marked.has(k) {
				continue
			}
			batch = append(batch, obj)
			if len(batch) == c.cfg.Batch {
				if err := c.sweep(ctx, kind, batch, c.cfg.Grace+time.Since(markStart), rep); err != nil {
					return err
				}
				batch = batch[:0]
			}
			if err := renew(); err != nil {
				return err
			}
		}
		if err := c.sweep(ctx, kind, batch, c.cfg.Grace+time.Since(markStart), rep); err != nil {
			return err
		}
	}

	if c.cfg.DryRun {
		return nil
	}
	for {
		n, err := c.store.BlobClaimsExpire(ctx, c.cfg.Grace, gcClaimsBatch)
		rep.ClaimsExpired += n
		if err != nil {
			return err
		}
		if n < gcClaimsBatch {
			return nil
		}
	}
}

// The mark's set is a Bloom filter: about 1.2 bytes a key at the size the
// catalog's statistics suggest (gcMarkFalsePositives), against 84 for a map of
// markKey. It never misses a key added; a key it holds by mistake (a false
// positive) is garbage kept until a later pass, whose filter is salted anew so
// that it errs on other keys. It is sized for the rows of the tables the mark
// reads (catalog.Store.BlobRefsSizeHint), or the keys of the collector's last
// mark if more, within [gcMarkMinKeys, gcMarkMaxKeys]: with more keys than
// that, it errs more often (a warning says so), never the other way.
const (
	gcMarkFalsePositives = 0.01
	gcMarkMinKeys        = 100_000
	gcMarkMaxKeys        = 50_000_000
)

// markSet is a pass's mark.
type markSet struct {
	f    *bloom.BloomFilter
	salt [8]byte
	buf  []byte
	n    int // distinct keys added (those the filter did not hold already)
}

func newMarkSet(hint int64) *markSet {
	n := uint(min(max(hint, gcMarkMinKeys), gcMarkMaxKeys))
	m := &markSet{f: bloom.NewWithEstimates(n, gcMarkFalsePositives)}
	_, _ = rand.Read(m.salt[:]) // never fails (crypto/rand)
	return m
}

func (m *markSet) data(k markKey) []byte {
	m.buf = append(append(append(m.buf[:0], m.salt[:]...), k.kind), k.digest[:]...)
	return m.buf
}

// add adds k; BlobRefs lists a key once per row naming it.
func (m *markSet) add(k markKey) {
	if !m.f.TestAndAdd(m.data(k)) {
		m.n++
	}
}

// has reports whether k was added, or is a false positive.
func (m *markSet) has(k markKey) bool { return m.f.Test(m.data(k)) }

func (m *markSet) bytes() uint { return m.f.Cap() / 8 }

// falsePositiveRate is the filter's expected rate at the keys added.
func (m *markSet) falsePositiveRate() float64 {
	k, bits := float64(m.f.K()), float64(m.f.Cap())
	return math.Pow(1-math.Exp(-k*float64(m.n)/bits), k)
}

// markKey is a key in the mark's set: its kind's index in collectedKinds (plus
// ownName for a key of its own, "<kind>/u/<hex>") and its 32 bytes of hex.
type markKey struct {
	kind   uint8
	digest [sha256.Size]byte
}

// ownName marks the kind of a markKey whose key is a name of its own.
const ownName = 0x80

// toMarkKey converts a key of a collected kind; false for any other key (an
// archive's, say), which the sweep never considers.
func toMarkKey(key string) (markKey, bool) {
	kind, hexName, unique, err := blobstore.SplitKey(key)
	if err != nil {
		return markKey{}, false
	}
	i := slices.Index(collectedKinds, kind)
	if i < 0 {
		return markKey{}, false
	}
	k := markKey{kind: uint8(i)}
	if unique {
		k.kind |= ownName
	}
	if _, err := hex.Decode(k.digest[:], []byte(hexName)); err != nil {
		return markKey{}, false
	}
	return k, true
}

// sweep deletes the objects of batch (unmarked) whose keys were not claimed
// within window, the time since the mark began plus the grace, nor named where
// catalog.Store.BlobSweep looks again (or, in a dry run, counts them).
func (c *Collector) sweep(ctx context.Context, kind string, batch []blobstore.Listed, window time.Duration, rep *GCReport) error {
	if len(batch) == 0 {
		return nil
	}
	keys := make([]string, len(batch))
	sizes := make(map[string]int64, len(batch))
	for i, o := range batch {
		keys[i] = o.Key
		sizes[o.Key] = o.Size
	}
	count := func(deleted []string) {
		kc := rep.ByKind[kind]
		for _, k := range deleted {
			rep.DeletedObjects++
			rep.DeletedBytes += sizes[k]
			kc.Objects++
			kc.Bytes += sizes[k]
			if !c.cfg.DryRun {
				c.metrics.reclaim(kind, 1, sizes[k])
			}
		}
		rep.ByKind[kind] = kc
	}
	if c.cfg.DryRun {
		refs, err := c.store.BlobsKept(ctx, keys, window)
		if err != nil {
			return err
		}
		var would []string
		for _, k := range keys {
			if !refs[k] {
				would = append(would, k)
				c.logger.Info("would delete an unreferenced object (dry run)", "key", k, "size", sizes[k])
			}
		}
		count(would)
		return nil
	}
	deleted, err := c.store.BlobSweep(ctx, c.cfg.Owner, keys, window, func(ctx context.Context, unref []string) ([]string, error) {
		var mu sync.Mutex
		done := make([]string, 0, len(unref))
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(gcDeleteConcurrency)
		for _, k := range unref {
			g.Go(func() error {
				if err := c.blobs.Delete(gctx, k); err != nil {
					return err
				}
				mu.Lock()
				done = append(done, k)
				mu.Unlock()
				return nil
			})
		}
		err := g.Wait()
		return done, err
	})
	count(deleted)
	if len(deleted) > 0 {
		c.logger.Debug("deleted unreferenced objects", "kind", kind, "count", len(deleted))
	}
	return err
}

// gcMetrics are the collector's Prometheus series.
type gcMetrics struct {
	scannedObjects   prometheus.Counter
	scannedBytes     prometheus.Counter
	reclaimedObjects *prometheus.CounterVec
	reclaimedBytes   *prometheus.CounterVec
	passes           *prometheus.CounterVec
}

func newGCMetrics(reg prometheus.Registerer) *gcMetrics {
	m := &gcMetrics{
		scannedObjects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_blob_gc_scanned_objects_total", Help: "Objects of the collected kinds (payloads, logs, bundles) listed by this server's blob collector.",
		}),
		scannedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_blob_gc_scanned_bytes_total", Help: "Bytes of the objects listed by this server's blob collector.",
		}),
		reclaimedObjects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_blob_gc_reclaimed_objects_total", Help: "Objects deleted by this server's blob collector, by kind: payloads, logs, bundles (unreferenced), tmp (temporary objects of crashed uploads), multipart (incomplete multipart uploads aborted).",
		}, []string{"kind"}),
		reclaimedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_blob_gc_reclaimed_bytes_total", Help: "Bytes deleted by this server's blob collector, by kind (as cairn_blob_gc_reclaimed_objects_total).",
		}, []string{"kind"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_blob_gc_passes_total", Help: "Passes of this server's blob collector, by result: done, dry_run, skipped (another server's pass, or the interval had not passed), failed.",
		}, []string{"result"}),
	}
	for _, k := range []string{blobstore.KindPayloads, blobstore.KindLogs, blobstore.KindBundles, "tmp", "multipart"} {
		m.reclaimedObjects.WithLabelValues(k)
		m.reclaimedBytes.WithLabelValues(k)
	}
	if reg != nil {
		reg.MustRegister(m.scannedObjects, m.scannedBytes, m.reclaimedObjects, m.reclaimedBytes, m.passes)
	}
	return m
}

func (m *gcMetrics) reclaim(kind string, objects int, bytes int64) {
	m.reclaimedObjects.WithLabelValues(kind).Add(float64(objects))
	m.reclaimedBytes.WithLabelValues(kind).Add(float64(bytes))
}
