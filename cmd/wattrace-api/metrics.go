package main

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/units/updater"
)

// selfCollector exports the updater's own counters on /metrics.
type selfCollector struct{ u *updater.Updater }

var (
	descCycles = prometheus.NewDesc("wattrace_api_update_cycles_total",
		"Update cycles run, by result (success or failure).", []string{"result"}, nil)
	descQueries = prometheus.NewDesc("wattrace_api_tsdb_queries_total",
		"Queries sent to the TSDB by the update cycles.", nil, nil)
	descSamples = prometheus.NewDesc("wattrace_api_tsdb_samples_total",
		"Raw samples read from the TSDB.", nil, nil)
	descRejected = prometheus.NewDesc("wattrace_api_tsdb_rejected_samples_total",
		"Samples refused by validation (not finite, negative), never counted.", nil, nil)
	descLast = prometheus.NewDesc("wattrace_api_last_update_timestamp_seconds",
		"End of the latest window recorded; falls behind while the TSDB can't be read.", nil, nil)
	descDuration = prometheus.NewDesc("wattrace_api_update_cycle_duration_seconds",
		"How long the latest update cycle took.", nil, nil)
)

func (c *selfCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descCycles, descQueries, descSamples, descRejected, descLast, descDuration} {
		ch <- d
	}
}

func (c *selfCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.u.Stats()
	ch <- prometheus.MustNewConstMetric(descCycles, prometheus.CounterValue, float64(s.Cycles-s.Failures), "success")
	ch <- prometheus.MustNewConstMetric(descCycles, prometheus.CounterValue, float64(s.Failures), "failure")
	ch <- prometheus.MustNewConstMetric(descQueries, prometheus.CounterValue, float64(s.Queries))
	ch <- prometheus.MustNewConstMetric(descSamples, prometheus.CounterValue, float64(s.Samples))
	ch <- prometheus.MustNewConstMetric(descRejected, prometheus.CounterValue, float64(s.Rejected))
	last := 0.0
	if !s.LastSuccess.IsZero() {
		last = float64(s.LastSuccess.UnixNano()) / 1e9
	}
	ch <- prometheus.MustNewConstMetric(descLast, prometheus.GaugeValue, last)
	ch <- prometheus.MustNewConstMetric(descDuration, prometheus.GaugeValue, s.LastDuration.Seconds())
}
