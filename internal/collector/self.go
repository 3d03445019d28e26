package collector

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/version"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// accountingModes are always exported, the active one as 1, so alerts can
// test wattrace_accounting_mode{mode="procfs"} == 1 without absent().
var accountingModes = []string{"bpf", "procfs"}

// selfCollector exports facts about the exporter itself. It cannot fail and
// is always on, so it is not one of the --collector.<name> collectors.
type selfCollector struct {
	buildInfo, mode, hierarchy, lastUpdate, intervals, mapDrops *desc
}

func newSelfCollector() *selfCollector {
	return &selfCollector{
		buildInfo:  newDesc("", "build_info", "Always 1; the labels identify the wattrace build.", "version", "revision", "goversion"),
		mode:       newDesc("accounting", "mode", "1 for the active per-task CPU accounting mode (bpf or procfs), 0 for the others. Exported once the first interval has completed.", "mode"),
		hierarchy:  newDesc("cgroup", "hierarchy_info", "Always 1; hierarchy names the cgroup hierarchy that keys workloads (v2, cpuacct or cpu). Exported once the first interval has completed.", "hierarchy"),
		lastUpdate: newDesc("stats", "last_update_timestamp_seconds", "Unix time at which the latest accounting interval ended. Exported once the first interval has completed."),
		intervals:  newDesc("stats", "intervals_total", "Accounting intervals completed since the exporter started."),
		mapDrops: newDesc("bpf_map", "drops_total",
			"Events a BPF program could not record because the map was full: their CPU time, IO or counts are lost to accounting, not attributed to anyone. Should stay 0; any increase means the map is too small for this node's processes or cgroups. Exported in BPF mode.",
			"map"),
	}
}

func (c *selfCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.buildInfo, c.mode, c.hierarchy, c.lastUpdate, c.intervals, c.mapDrops)
}

func (c *selfCollector) update(out *sink, snap *snapshot.Snapshot) {
	out.add(c.buildInfo, prometheus.GaugeValue, 1, version.Version, version.Revision, version.GoVersion)
	if snap == nil {
		out.add(c.intervals, prometheus.CounterValue, 0)
		return
	}
	seen := false
	for _, m := range accountingModes {
		v := 0.0
		if m == snap.Mode {
			v, seen = 1, true
		}
		out.add(c.mode, prometheus.GaugeValue, v, m)
	}
	if !seen && snap.Mode != "" {
		out.add(c.mode, prometheus.GaugeValue, 1, snap.Mode)
	}
	if snap.Hierarchy != "" {
		out.add(c.hierarchy, prometheus.GaugeValue, 1, snap.Hierarchy)
	}
	out.add(c.lastUpdate, prometheus.GaugeValue, float64(snap.Time.UnixNano())/1e9)
	out.add(c.intervals, prometheus.CounterValue, float64(snap.Intervals))
	for _, d := range snap.MapDrops {
		out.add(c.mapDrops, prometheus.CounterValue, float64(d.Drops), d.Map)
	}
}
