package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the API's Prometheus series, registered by New with Config.Registry and
// shared with LimitConnections through Server.Metrics. A nil *Metrics records nothing.
// It is safe for concurrent use.
type Metrics struct {
	leaseLostTotal *prometheus.CounterVec
	refusedTotal   *prometheus.CounterVec
	slowBodyTotal  prometheus.Counter
	connections    prometheus.Gauge
	streams        prometheus.Gauge
	hooksTotal     *prometheus.CounterVec
	// Events (POST /v1/events, docs/events.md): none has the event's name as a
	// label, which senders choose (unbounded).
	eventsTotal     *prometheus.CounterVec
	eventRunsTotal  *prometheus.CounterVec
	eventErrorTotal prometheus.Counter
	eventIngest     prometheus.Histogram
}

// newMetrics registers the API's series with reg.
func newMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leaseLostTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_api_lease_lost_total", Help: "Writes through the API rejected because the lease was no longer current, by operation.",
		}, []string{"op"}),
		refusedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_api_refused_total", Help: "Requests answered 503 because a cap was reached, by cap: connections (CAIRN_MAX_CONNECTIONS) or streams (CAIRN_MAX_STREAMS).",
		}, []string{"cap"}),
		slowBodyTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_api_slow_body_total", Help: "Request bodies cut because they arrived below the minimum rate (CAIRN_MIN_BODY_RATE).",
		}),
		connections: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cairn_api_connections", Help: "HTTP connections open on the API listener.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "cairn_api_event_streams", Help: "Event streams (GET …/events/stream) open.",
		}),
		hooksTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_api_hook_deliveries_total", Help: "Webhook deliveries (POST /v1/hooks/…), by outcome: started (a new run), emitted (an event, of a hook with emit), replay (the run or event of an earlier delivery with the same key), refused (no valid signature, or the hook's secret not set).",
		}, []string{"outcome"}),
		eventsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_events_received_total", Help: "Events received (POST /v1/events), by duplicate: true for an id received before (nothing done again).",
		}, []string{"duplicate"}),
		eventRunsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_event_runs_total", Help: "What received events did, by effect: started (runs their triggers started), resumed (waiting wait_for_event steps they completed), canceled (runs their cancel_on canceled).",
		}, []string{"effect"}),
		eventErrorTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "cairn_event_expression_errors_total", Help: "Expressions (a trigger's if or input, a wait's or cancel_on's match) that failed on a received event; each blocked only its own trigger, wait or cancel_on.",
		}),
		eventIngest: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "cairn_event_ingest_seconds", Help: "Time to receive an event (POST /v1/events, its body read): storing it, large data in the blob store, and the runs it starts, resumes and cancels, in one transaction.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
	}
	reg.MustRegister(m.leaseLostTotal, m.refusedTotal, m.slowBodyTotal, m.connections, m.streams, m.hooksTotal,
		m.eventsTotal, m.eventRunsTotal, m.eventErrorTotal, m.eventIngest)
	return m
}

// Metrics returns the series New registered with Config.Registry (nil without one),
// for ConnLimitConfig.Metrics.
func (s *Server) Metrics() *Metrics { return s.metrics }

func (m *Metrics) leaseLost(op string) {
	if m != nil {
		m.leaseLostTotal.WithLabelValues(op).Inc()
	}
}

func (m *Metrics) refused(cap string) {
	if m != nil {
		m.refusedTotal.WithLabelValues(cap).Inc()
	}
}

func (m *Metrics) hookDelivery(outcome string) {
	if m != nil {
		m.hooksTotal.WithLabelValues(outcome).Inc()
	}
}

// eventReceived records an event's ingest, begun at start: a duplicate counts as
// received again, not its effects (they were counted the first time).
func (m *Metrics) eventReceived(start time.Time, duplicate bool, started, resumed, canceled, errs int) {
	if m == nil {
		return
	}
	m.eventIngest.Observe(time.Since(start).Seconds())
	if duplicate {
		m.eventsTotal.WithLabelValues("true").Inc()
		return
	}
	m.eventsTotal.WithLabelValues("false").Inc()
	m.eventRunsTotal.WithLabelValues("started").Add(float64(started))
	m.eventRunsTotal.WithLabelValues("resumed").Add(float64(resumed))
	m.eventRunsTotal.WithLabelValues("canceled").Add(float64(canceled))
	m.eventErrorTotal.Add(float64(errs))
}

func (m *Metrics) slowBody() {
	if m != nil {
		m.slowBodyTotal.Inc()
	}
}

func (m *Metrics) addConnections(n float64) {
	if m != nil {
		m.connections.Add(n)
	}
}

func (m *Metrics) addStreams(n float64) {
	if m != nil {
		m.streams.Add(n)
	}
}
