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
// dispatchers: ready backlog, oldest ready age, running and suspended steps, and the
// use of each concurrency limit. It reads them at scrape time with two queries
// (catalog.StepGaugesGet, catalog.LimitList), at most once every 5s.
type CatalogGauges struct {
	store  *catalog.Store
	logger *slog.Logger

	mu     sync.Mutex
	at     time.Time
	last   catalog.StepGauges
	limits []limitGauge
	ok     bool

	ready, oldest, running, suspended *prometheus.Desc
	limitInUse, limitSlots            *prometheus.Desc
	limitReady, limitKeys             *prometheus.Desc
}

// limitGauge is the use of one concurrency limit, over its keys.
type limitGauge struct {
	name                      string
	inUse, slots, ready, keys int
}

// limitGauges sums the keys of each limit in use; a limit set at run time with no
// key in use shows with nothing in use.
func limitGauges(use []catalog.LimitUsage, overrides []catalog.LimitOverride) []limitGauge {
	var out []limitGauge
	at := map[string]int{}
	for _, u := range use {
		i, ok := at[u.Name]
		if !ok {
			i = len(out)
			at[u.Name] = i
			out = append(out, limitGauge{name: u.Name})
		}
		g := &out[i]
		g.inUse += u.Running
		g.ready += u.Ready
		g.keys++
		g.slots = max(g.slots, u.Limit)
	}
	for _, o := range overrides {
		if _, ok := at[o.Name]; !ok && o.Concurrency != nil {
			// A limit set at run time that no key uses yet (a rate-only
			// override has no slots).
			out = append(out, limitGauge{name: o.Name, slots: *o.Concurrency})
		}
	}
	return out
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
		limitInUse: prometheus.NewDesc("cairn_limit_in_use", "Slots of a concurrency limit in use (its steps running), summed over its keys.",
			[]string{"name"}, nil),
		limitSlots: prometheus.NewDesc("cairn_limit", "A concurrency limit's slots per key: the limit set at run time, else the steps' own.",
			[]string{"name"}, nil),
		limitReady: prometheus.NewDesc("cairn_limit_ready", "Steps of a concurrency limit ready to start (most waiting for a slot), summed over its keys.",
			[]string{"name"}, nil),
		limitKeys: prometheus.NewDesc("cairn_limit_keys", "Keys of a concurrency limit with a step running or ready.",
			[]string{"name"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *CatalogGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.ready
	ch <- g.oldest
	ch <- g.running
	ch <- g.suspended
	ch <- g.limitInUse
	ch <- g.limitSlots
	ch <- g.limitReady
	ch <- g.limitKeys
}

// Collect implements prometheus.Collector. When the catalog cannot answer, the series
// are left out of the scrape (absent, not zero) and the error is logged.
func (g *CatalogGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if !g.ok || time.Since(g.at) >= gaugeMaxAge {
		ctx, cancel := context.WithTimeout(context.Background(), gaugeTimeout)
		v, err := g.store.StepGaugesGet(ctx)
		var use []catalog.LimitUsage
		var overrides []catalog.LimitOverride
		if err == nil {
			use, overrides, err = g.store.LimitList(ctx, "")
		}
		cancel()
		g.ok = err == nil
		if err != nil {
			g.logger.Warn("read the catalog's gauges", "error", err)
		} else {
			g.last, g.limits, g.at = v, limitGauges(use, overrides), time.Now()
		}
	}
	v, limits, ok := g.last, g.limits, g.ok
	g.mu.Unlock()
	if !ok {
		return
	}
	ch <- prometheus.MustNewConstMetric(g.ready, prometheus.GaugeValue, float64(v.Ready))
	ch <- prometheus.MustNewConstMetric(g.oldest, prometheus.GaugeValue, v.OldestReady.Seconds())
	ch <- prometheus.MustNewConstMetric(g.running, prometheus.GaugeValue, float64(v.Running))
	ch <- prometheus.MustNewConstMetric(g.suspended, prometheus.GaugeValue, float64(v.Suspended))
	for _, l := range limits {
		ch <- prometheus.MustNewConstMetric(g.limitInUse, prometheus.GaugeValue, float64(l.inUse), l.name)
		ch <- prometheus.MustNewConstMetric(g.limitSlots, prometheus.GaugeValue, float64(l.slots), l.name)
		ch <- prometheus.MustNewConstMetric(g.limitReady, prometheus.GaugeValue, float64(l.ready), l.name)
		ch <- prometheus.MustNewConstMetric(g.limitKeys, prometheus.GaugeValue, float64(l.keys), l.name)
	}
}
