package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// NameProbes is the collector of the kernel probes' counters.
const NameProbes = "probes"

func init() {
	register(Registration{Name: NameProbes, Flag: true, DefaultOn: true,
		Help: "Enable the kernel probes (BPF mode): page cache, softirqs, block IO and network per cgroup, and perf counters where the CPU has them.",
		new:  func(Options) subCollector { return newProbesCollector() }})
}

// probesCollector exports what the optional kernel probes count per cgroup
// (the families of snapshot.ProbeFamilies, and the perf counters), the
// node's softirqs by vector, and which probes run. A family appears only
// when its probe runs, so a kernel without a hook shows no false zeros.
type probesCollector struct {
	active                           *prometheus.Desc
	families                         []probeFamily
	perf                             *prometheus.Desc
	nodeSoftirqs, nodeSoftirqSeconds *prometheus.Desc
}

type probeFamily struct {
	snapshot.ProbeFamily
	desc *prometheus.Desc
}

func newProbesCollector() *probesCollector {
	c := &probesCollector{
		active:             newDesc("probe", "active", "1 for each kernel probe that loaded and runs.", "probe"),
		perf:               newDesc("cgroup", "perf_events_total", "Perf counter events credited to the cgroup's tasks at context switches, scaled for multiplexing.", "cgroup", "counter"),
		nodeSoftirqs:       newDesc("node", "softirqs_total", "Softirqs run on the node by vector.", "vector"),
		nodeSoftirqSeconds: newDesc("node", "softirq_seconds_total", "Time spent in softirqs on the node by vector.", "vector"),
	}
	for _, f := range snapshot.ProbeFamilies {
		c.families = append(c.families, probeFamily{f, newDesc("cgroup", f.Name, f.Help, append([]string{"cgroup"}, f.Labels...)...)})
	}
	return c
}

func (c *probesCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.active, c.perf, c.nodeSoftirqs, c.nodeSoftirqSeconds)
	for _, f := range c.families {
		ch <- f.desc
	}
}

func (c *probesCollector) update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	on := map[string]bool{}
	for _, p := range snap.Probes {
		on[p] = true
		ch <- metric(c.active, prometheus.GaugeValue, 1, p)
	}
	for _, v := range snap.Softirqs {
		ch <- metric(c.nodeSoftirqs, prometheus.CounterValue, float64(v.Count), v.Name)
		ch <- metric(c.nodeSoftirqSeconds, prometheus.CounterValue, float64(v.Ns)/1e9, v.Name)
	}
	for _, a := range aggregateProbes(snap.Cgroups) {
		for _, f := range c.families {
			if !on[f.Probe] {
				continue
			}
			for _, s := range f.Series {
				ch <- metric(f.desc, prometheus.CounterValue, s.Value(&a.stats), append([]string{a.cgroup}, s.Labels...)...)
			}
		}
		for i, name := range snap.Counters {
			if i < len(a.stats.Counters) {
				ch <- metric(c.perf, prometheus.CounterValue, float64(a.stats.Counters[i]), a.cgroup, name)
			}
		}
	}
	return nil
}

type probeAgg struct {
	cgroup string
	stats  snapshot.ProbeStats
}

// aggregateProbes sums probe counters of workloads sharing a cgroup path
// (a re-created cgroup retained beside its successor), as the cgroup
// collector does for energy.
func aggregateProbes(ws []snapshot.Consumer) []*probeAgg {
	idx := map[string]*probeAgg{}
	var out []*probeAgg
	for i := range ws {
		if ws[i].Probes == nil {
			continue
		}
		a := idx[ws[i].Cgroup]
		if a == nil {
			a = &probeAgg{cgroup: ws[i].Cgroup}
			idx[a.cgroup] = a
			out = append(out, a)
		}
		a.stats.Add(*ws[i].Probes)
	}
	return out
}
