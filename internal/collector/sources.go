package collector

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// NameSources is the collector of the sources' health.
const NameSources = "sources"

func init() {
	register(Registration{Name: NameSources,
		on:  func(o Options) bool { return o.MeterHealth || o.Emissions },
		new: func(Options) subCollector { return newSourceCollector() }})
}

// sourceCollector exports the health of every source that reports it, as
// the snapshot's Meters carry it: the meters (a BMC, hwmon, RAPL), the
// accounting's counters (procfs, bpf), the cgroup reader (cgroupfs) and the
// GPUs; and every source's rejected readings, the carbon providers'
// included.
type sourceCollector struct {
	age, up, reads, failed, rejected, degraded *desc
}

func newSourceCollector() *sourceCollector {
	return &sourceCollector{
		age:    newDesc("source", "age_seconds", "Age of the source's last good reading; it grows while the source fails or is late, and its figures are then those of the last good reading. 0 for a source read synchronously each interval.", "source"),
		up:     newDesc("source", "up", "1 if the source's latest read succeeded.", "source"),
		reads:  newDesc("source", "reads_total", "Reads of the source (for cgroupfs, of each cgroup).", "source"),
		failed: newDesc("source", "read_errors_total", "Reads of the source that failed or timed out.", "source"),
		rejected: newDesc("source", "rejected_readings_total",
			"Readings a source gave that validation refused (not finite, out of range, a counter going backwards), by reason; they were never credited. Any increase means a meter or file is misbehaving.",
			"source", "reason"),
		degraded: newDesc("source", "degraded",
			"1 while the source is down or degraded, with why as a fixed token (nvml_driver_library_mismatch, nvml_gpu_lost, fdinfo_no_permission, kfd_unattributed, …); absent while it is fine.",
			"source", "reason"),
	}
}

func (c *sourceCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.age, c.up, c.reads, c.failed, c.rejected, c.degraded)
}

func (c *sourceCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	for _, m := range snap.Meters {
		up := 0.0
		if m.Up {
			up = 1
		}
		out.add(c.age, prometheus.GaugeValue, m.Age.Seconds(), m.Source)
		out.add(c.up, prometheus.GaugeValue, up, m.Source)
		out.add(c.reads, prometheus.CounterValue, float64(m.Reads), m.Source)
		out.add(c.failed, prometheus.CounterValue, float64(m.Errors), m.Source)
		c.emitRejected(out, m)
		if m.Reason != "" {
			out.add(c.degraded, prometheus.GaugeValue, 1, m.Source, m.Reason)
		}
	}
	// Carbon-intensity providers' health is in the emissions families;
	// their rejected readings join every other source's here.
	for _, m := range snap.Carbon {
		c.emitRejected(out, m)
	}
	return nil
}

func (c *sourceCollector) emitRejected(out *sink, m reading.SourceHealth) {
	reasons := make([]string, 0, len(m.Rejected))
	for r := range m.Rejected {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		out.add(c.rejected, prometheus.CounterValue, float64(m.Rejected[r]), m.Source, r)
	}
}
