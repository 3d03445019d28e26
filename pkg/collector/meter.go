package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// NameMeters is the collector of slow meters' health.
const NameMeters = "meters"

// MeterStatus is the health of one meter read in the background (a BMC,
// hwmon): how old its last good reading is and how its reads went.
type MeterStatus struct {
	Source       string
	Age          time.Duration
	Up           bool
	Reads, Fails uint64
}

// MeterStatusSource lists the background meters; main adapts the power
// package's cached meters to it.
type MeterStatusSource interface {
	MeterStatus() []MeterStatus
}

type meterCollector struct {
	src                    MeterStatusSource
	age, up, reads, failed *prometheus.Desc
}

func newMeterCollector(src MeterStatusSource) *meterCollector {
	l := []string{"source"}
	return &meterCollector{
		src: src,
		age: prometheus.NewDesc(prometheus.BuildFQName(namespace, "power_meter", "age_seconds"),
			"Age of the meter's last good reading; it grows while the meter fails or is late, and its energy is then that of the last good reading.", l, nil),
		up: prometheus.NewDesc(prometheus.BuildFQName(namespace, "power_meter", "up"),
			"1 if the meter's latest read succeeded.", l, nil),
		reads: prometheus.NewDesc(prometheus.BuildFQName(namespace, "power_meter", "reads_total"),
			"Reads of the meter.", l, nil),
		failed: prometheus.NewDesc(prometheus.BuildFQName(namespace, "power_meter", "read_errors_total"),
			"Reads of the meter that failed or timed out.", l, nil),
	}
}

func (c *meterCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.age
	ch <- c.up
	ch <- c.reads
	ch <- c.failed
}

func (c *meterCollector) update(ch chan<- prometheus.Metric, _ *snapshot.Snapshot) error {
	for _, m := range c.src.MeterStatus() {
		up := 0.0
		if m.Up {
			up = 1
		}
		ch <- metric(c.age, prometheus.GaugeValue, m.Age.Seconds(), m.Source)
		ch <- metric(c.up, prometheus.GaugeValue, up, m.Source)
		ch <- metric(c.reads, prometheus.CounterValue, float64(m.Reads), m.Source)
		ch <- metric(c.failed, prometheus.CounterValue, float64(m.Fails), m.Source)
	}
	return nil
}
