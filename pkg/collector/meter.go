package collector

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// NameMeters is the collector of the meters' health.
const NameMeters = "meters"

func init() {
	register(Registration{Name: NameMeters,
		on:  func(o Options) bool { return o.MeterHealth || o.Emissions },
		new: func(Options) subCollector { return newMeterCollector() }})
}

// meterCollector exports the health of the sources behind the meter that
// report it (meters read in the background: a BMC, hwmon), as the
// snapshot's Meters carry it.
type meterCollector struct {
	age, up, reads, failed, rejected, degraded *prometheus.Desc
}

func newMeterCollector() *meterCollector {
	return &meterCollector{
		age:    newDesc("power_meter", "age_seconds", "Age of the meter's last good reading; it grows while the meter fails or is late, and its energy is then that of the last good reading.", "source"),
		up:     newDesc("power_meter", "up", "1 if the meter's latest read succeeded.", "source"),
		reads:  newDesc("power_meter", "reads_total", "Reads of the meter.", "source"),
		failed: newDesc("power_meter", "read_errors_total", "Reads of the meter that failed or timed out.", "source"),
		rejected: newDesc("source", "rejected_readings_total",
			"Readings a source gave that validation refused (not finite, out of range, a counter going backwards), by reason; they were never credited. Any increase means a meter or file is misbehaving.",
			"source", "reason"),
		degraded: newDesc("source", "degraded",
			"1 while the source is down or degraded, with why as a fixed token (nvml_driver_library_mismatch, nvml_gpu_lost, fdinfo_no_permission, kfd_unattributed, …); absent while it is fine.",
			"source", "reason"),
	}
}

func (c *meterCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.age, c.up, c.reads, c.failed, c.rejected, c.degraded)
}

func (c *meterCollector) update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	for _, m := range snap.Meters {
		up := 0.0
		if m.Up {
			up = 1
		}
		ch <- metric(c.age, prometheus.GaugeValue, m.Age.Seconds(), m.Source)
		ch <- metric(c.up, prometheus.GaugeValue, up, m.Source)
		ch <- metric(c.reads, prometheus.CounterValue, float64(m.Reads), m.Source)
		ch <- metric(c.failed, prometheus.CounterValue, float64(m.Errors), m.Source)
		c.emitRejected(ch, m)
		if m.Reason != "" {
			ch <- metric(c.degraded, prometheus.GaugeValue, 1, m.Source, m.Reason)
		}
	}
	// Carbon-intensity providers' health is in the emissions families;
	// their rejected readings join every other source's here.
	for _, m := range snap.Carbon {
		c.emitRejected(ch, m)
	}
	return nil
}

func (c *meterCollector) emitRejected(ch chan<- prometheus.Metric, m snapshot.SourceHealth) {
	reasons := make([]string, 0, len(m.Rejected))
	for r := range m.Rejected {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		ch <- metric(c.rejected, prometheus.CounterValue, float64(m.Rejected[r]), m.Source, r)
	}
}
