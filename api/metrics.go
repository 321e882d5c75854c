package api

import "github.com/prometheus/client_golang/prometheus"

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
			Name: "cairn_api_hook_deliveries_total", Help: "Webhook deliveries (POST /v1/hooks/…), by outcome: started (a new run), replay (the run of an earlier delivery with the same key), refused (no valid signature, or the hook's secret not set).",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.leaseLostTotal, m.refusedTotal, m.slowBodyTotal, m.connections, m.streams, m.hooksTotal)
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
