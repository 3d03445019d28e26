package collector

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// accountingModes are always exported, the active one as 1, so alerts can
// test wattrace_accounting_mode{mode="procfs"} == 1 without absent().
var accountingModes = []string{"bpf", "procfs"}

// selfCollector exports facts about the exporter itself. It cannot fail and
// is always on, so it is not one of the --collector.<name> collectors.
type selfCollector struct {
	buildInfo, mode, hierarchy, lastUpdate, intervals *prometheus.Desc
}

func newSelfCollector() *selfCollector {
	return &selfCollector{
		buildInfo: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "", "build_info"),
			"Always 1; the labels identify the wattrace build.",
			[]string{"version", "revision", "goversion"}, nil),
		mode: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "accounting", "mode"),
			"1 for the active per-task CPU accounting mode (bpf or procfs), 0 for the others. Exported once the first interval has completed.",
			[]string{"mode"}, nil),
		hierarchy: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "cgroup", "hierarchy_info"),
			"Always 1; hierarchy names the cgroup hierarchy that keys workloads (v2, cpuacct or cpu). Exported once the first interval has completed.",
			[]string{"hierarchy"}, nil),
		lastUpdate: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "stats", "last_update_timestamp_seconds"),
			"Unix time at which the latest accounting interval ended. Exported once the first interval has completed.",
			nil, nil),
		intervals: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "stats", "intervals_total"),
			"Accounting intervals completed since the exporter started.",
			nil, nil),
	}
}

func (c *selfCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.buildInfo
	ch <- c.mode
	ch <- c.hierarchy
	ch <- c.lastUpdate
	ch <- c.intervals
}

func (c *selfCollector) update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) {
	ch <- metric(c.buildInfo, prometheus.GaugeValue, 1, version.Version, version.Revision, version.GoVersion)
	if snap == nil {
		ch <- metric(c.intervals, prometheus.CounterValue, 0)
		return
	}
	seen := false
	for _, m := range accountingModes {
		v := 0.0
		if m == snap.Mode {
			v, seen = 1, true
		}
		ch <- metric(c.mode, prometheus.GaugeValue, v, m)
	}
	if !seen && snap.Mode != "" {
		ch <- metric(c.mode, prometheus.GaugeValue, 1, snap.Mode)
	}
	if snap.Hierarchy != "" {
		ch <- metric(c.hierarchy, prometheus.GaugeValue, 1, snap.Hierarchy)
	}
	ch <- metric(c.lastUpdate, prometheus.GaugeValue, float64(snap.Time.UnixNano())/1e9)
	ch <- metric(c.intervals, prometheus.CounterValue, float64(snap.Intervals))
}
