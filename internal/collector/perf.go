package collector

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// NamePerf is the collector of opt-in perf profiling.
const NamePerf = "perf"

func init() {
	register(Registration{Name: NamePerf, Flag: true, DefaultOn: false,
		Help: "Count perf events for processes that opt in through an environment variable (collector.perf.env-var).",
		new:  func(Options) subCollector { return newPerfCollector() }})
}

// perfCollector exports the perf events counted for the processes that
// opted in (an environment variable), summed per cgroup, ended processes
// included. Clock events are nanoseconds, so they get their own family in
// seconds.
type perfCollector struct {
	hardware, software, cache, clock *desc
}

func newPerfCollector() *perfCollector {
	d := func(name, help, label string) *desc {
		return newDesc("cgroup", name, help, "cgroup", label)
	}
	return &perfCollector{
		hardware: d("perf_hardware_events_total", "Hardware perf events of the cgroup's opted-in processes, scaled for multiplexing.", "event"),
		software: d("perf_software_events_total", "Software perf events of the cgroup's opted-in processes.", "event"),
		cache:    d("perf_cache_events_total", "Cache perf events of the cgroup's opted-in processes (access counts hits and misses).", "event"),
		clock:    d("perf_clock_seconds_total", "cpu_clock and task_clock of the cgroup's opted-in processes.", "clock"),
	}
}

func (c *perfCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.hardware, c.software, c.cache, c.clock)
}

func (c *perfCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	kind := map[string]reading.PerfEvent{}
	for _, e := range snap.PerfEvents {
		kind[e.Name] = e
	}
	for _, w := range snap.Cgroups {
		if w.Perf == nil {
			continue
		}
		names := make([]string, 0, len(w.Perf))
		for n := range w.Perf {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			v, e := w.Perf[n], kind[n]
			switch {
			case e.Unit == "ns":
				out.add(c.clock, prometheus.CounterValue, v/1e9, w.Cgroup, n)
			case e.Kind == reading.PerfKindHardware:
				out.add(c.hardware, prometheus.CounterValue, v, w.Cgroup, n)
			case e.Kind == reading.PerfKindCache:
				out.add(c.cache, prometheus.CounterValue, v, w.Cgroup, n)
			default:
				out.add(c.software, prometheus.CounterValue, v, w.Cgroup, n)
			}
		}
	}
	return nil
}
