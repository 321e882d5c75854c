package runtime

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/catalog"
)

// PoolDemand is a Prometheus collector of cairn_pool_demand{tags="…"}: for each
// pool of dispatchers it is told of (a tag set), the steps the pool could claim now
// plus the attempts it holds (catalog.PoolDemandGet), the signal an autoscaler
// scales the pool on (docs/scaling.md). Every server reports every pool, so that a
// pool scaled to zero still has its series. It reads the catalog at scrape time,
// one query per pool, at most once every 5s (as CatalogGauges).
type PoolDemand struct {
	store  *catalog.Store
	logger *slog.Logger
	pools  [][]string

	mu   sync.Mutex
	at   time.Time
	last []catalog.PoolDemand
	ok   bool

	demand *prometheus.Desc
}

// NewPoolDemand returns the collector of the pools' demand; pools are tag sets
// (nil or empty: the untagged pool), reported once each whatever their order or
// duplicates. Register it once per process.
func NewPoolDemand(store *catalog.Store, pools [][]string, logger *slog.Logger) *PoolDemand {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	var uniq [][]string
	for _, p := range pools {
		p = catalog.NormalizeTags(p)
		if label := strings.Join(p, ","); !seen[label] {
			seen[label] = true
			uniq = append(uniq, p)
		}
	}
	return &PoolDemand{
		store:  store,
		logger: logger.With("component", "metrics"),
		pools:  uniq,
		demand: prometheus.NewDesc("cairn_pool_demand",
			"Steps a pool of dispatchers with these tags (sorted, comma-separated) could claim now, plus the attempts it holds: 0 when it may scale to zero.",
			[]string{"tags"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *PoolDemand) Describe(ch chan<- *prometheus.Desc) { ch <- g.demand }

// Collect implements prometheus.Collector. When the catalog cannot answer, the
// series are left out of the scrape (absent, not zero: an autoscaler must not take
// an outage for an idle pool) and the error is logged.
func (g *PoolDemand) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if !g.ok || time.Since(g.at) >= gaugeMaxAge {
		ctx, cancel := context.WithTimeout(context.Background(), gaugeTimeout)
		out := make([]catalog.PoolDemand, 0, len(g.pools))
		var err error
		for _, p := range g.pools {
			var d catalog.PoolDemand
			if d, err = g.store.PoolDemandGet(ctx, p, 0); err != nil {
				break
			}
			out = append(out, d)
		}
		cancel()
		g.ok = err == nil
		if err != nil {
			g.logger.Warn("read the pools' demand", "error", err)
		} else {
			g.last, g.at = out, time.Now()
		}
	}
	last, ok := g.last, g.ok
	g.mu.Unlock()
	if !ok {
		return
	}
	for _, d := range last {
		ch <- prometheus.MustNewConstMetric(g.demand, prometheus.GaugeValue, float64(d.Demand()), strings.Join(d.Tags, ","))
	}
}
