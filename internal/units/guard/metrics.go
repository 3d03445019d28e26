package guard

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the guard's own series, on the server's /metrics.
type metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "wattrace_api_guard_requests_total",
			Help: "Requests to the query guard, by endpoint and outcome (ok, forbidden, bad_request, unauthorized, not_found, upstream_refused, upstream_error, canceled, internal).",
		}, []string{"endpoint", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "wattrace_api_guard_upstream_duration_seconds",
			Help:    "Time the TSDB took to answer the guard's forwarded requests, by endpoint.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}, []string{"endpoint"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("guard metrics: registered twice: %w", err)
			}
			return nil, fmt.Errorf("guard metrics: %w", err)
		}
	}
	return m, nil
}

func (m *metrics) outcome(endpoint, outcome string) {
	m.requests.WithLabelValues(endpoint, outcome).Inc()
}
