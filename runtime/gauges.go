package runtime

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairnrun/cairn/catalog"
)

// gaugeMaxAge is how long a scrape reuses the catalog's last answer: scrapers of
// several servers (or several scrapers) cost the database one query per interval.
const gaugeMaxAge = 5 * time.Second

// gaugeTimeout bounds the catalog query of a scrape.
const gaugeTimeout = 5 * time.Second

// CatalogGauges is a Prometheus collector of the catalog's queue, over all runs and
// dispatchers: ready backlog, oldest ready age, running and suspended steps. It reads
// them at scrape time with one query (catalog.StepGaugesGet), at most once every 5s.
type CatalogGauges struct {
	store  *catalog.Store
	logger *slog.Logger

	mu   sync.Mutex
	at   time.Time
	last catalog.StepGauges
	ok   bool

	ready, oldest, running, suspended *prometheus.Desc
}

// NewCatalogGauges returns the collector; register it once per process.
func NewCatalogGauges(store *catalog.Store, logger *slog.Logger) *CatalogGauges {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &CatalogGauges{
		store:     store,
		logger:    logger.With("component", "metrics"),
		ready:     prometheus.NewDesc("cairn_steps_ready", "Steps ready to be claimed now, over all runs (the backlog).", nil, nil),
		oldest:    prometheus.NewDesc("cairn_steps_oldest_ready_seconds", "How long the oldest ready step has been waiting to be claimed (0 with none).", nil, nil),
		running:   prometheus.NewDesc("cairn_steps_running", "Steps leased to a dispatcher, over all dispatchers.", nil, nil),
		suspended: prometheus.NewDesc("cairn_steps_suspended", "Steps in a durable wait (sleep, signal, approval, callback).", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *CatalogGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.ready
	ch <- g.oldest
	ch <- g.running
	ch <- g.suspended
}

// Collect implements prometheus.Collector. When the catalog cannot answer, the series
// are left out of the scrape (absent, not zero) and the error is logged.
func (g *CatalogGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if !g.ok || time.Since(g.at) >= gaugeMaxAge {
		ctx, cancel := context.WithTimeout(context.Background(), gaugeTimeout)
		v, err := g.store.StepGaugesGet(ctx)
		cancel()
		g.ok = err == nil
		if err != nil {
			g.logger.Warn("read the catalog's gauges", "error", err)
		} else {
			g.last, g.at = v, time.Now()
		}
	}
	v, ok := g.last, g.ok
	g.mu.Unlock()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(g.ready, prometheus.GaugeValue, float64(v.Ready))
	ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, v.OldestReady.Seconds())
	ch <- prometheus.MustNewConstMetric(g.running, prometheus.GaugeValue, float64(v.Running))
	ch <- prometheus.MustNewConstMetric(g.suspended, prometheus.GaugeValue, float64(v.Suspended))
}
