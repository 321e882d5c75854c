package api

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the API's Prometheus series. A nil *Metrics records nothing.
type Metrics struct {
	leaseLostTotal *prometheus.CounterVec
}

// NewMetrics registers the API's series with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		leaseLostTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "cairn_api_lease_lost_total", Help: "Writes through the API rejected because the lease was no longer current, by operation.",
		}, []string{"op"}),
	}
	reg.MustRegister(m.leaseLostTotal)
	return m
}

func (m *Metrics) leaseLost(op string) {
	if m != nil {
		m.leaseLostTotal.WithLabelValues(op).Inc()
	}
}
