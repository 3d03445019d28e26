package collector

import (
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// NameProbes is the collector of the kernel probes' counters.
const NameProbes = "probes"

func init() {
	register(withSettings(Registration{Name: NameProbes, Flag: true, DefaultOn: true,
		Help: "Enable the kernel probes (BPF mode): page cache, softirqs, block IO and network per node and workload (per cgroup with collector.probes.per-cgroup), and perf counters where the CPU has them.",
		new: func(o Options) subCollector {
			own := settingsOf[probesSettings](o, NameProbes)
			return newProbesCollector(own.PerCgroup, own.SoftirqWorkloads)
		}}, func(s *setting.Set, o *probesSettings) {
		s.Bool(&o.SoftirqWorkloads, "collector.probes.softirq-per-workload", false, "Export softirq_interrupted (softirqs counted against whichever task they interrupted, not work done for it) per workload level and per cgroup too, not only per node; the node's softirqs by vector are always exported.")
		s.Bool(&o.PerCgroup, "collector.probes.per-cgroup", false, "Export the probes' families per cgroup as well as per node and workload level: 16 series per cgroup whose tasks used every probed resource (families all zero are left out).")
	}))
}

// probesSettings are the probes collector's own settings.
type probesSettings struct {
	// PerCgroup exports the probe families per cgroup as well as per node
	// and workload.
	PerCgroup bool
	// SoftirqWorkloads exports the softirq_interrupted families per
	// workload level and cgroup too, not only per node (the workloads
	// collector follows it).
	SoftirqWorkloads bool
}

// probesCollector exports what the optional kernel probes count (the
// families of reading.ProbeFamilies) for the node and, when asked, per
// cgroup, with the perf counters per cgroup; the node's softirqs by vector;
// and which probes run. The workload levels' probe families are the
// workloads collector's. A family appears only when its probe runs and
// some series of it is not zero, so a kernel without a hook, or a node
// whose tasks never used the network, shows no wall of zeros.
type probesCollector struct {
	active                           *desc
	node, cgroup                     probeLevel
	perCgroup                        bool
	perf                             *desc
	nodeSoftirqs, nodeSoftirqSeconds *desc
}

type probeFamily struct {
	reading.ProbeFamily
	desc *desc
}

// probeLevel is the probe families at one level: the node, the cgroups, or
// a workload level.
type probeLevel []probeFamily

// newProbeLevel builds wattrace_<sub>_<family> for every probe family,
// labelled with labels then the family's own; without softirq, not the
// softirq_interrupted families.
func newProbeLevel(sub, of string, labels []string, softirq bool) probeLevel {
	var out probeLevel
	for _, f := range reading.ProbeFamilies {
		if f.Probe == reading.ProbeSoftirq && !softirq {
			continue
		}
		help := strings.ReplaceAll(f.Help, "the cgroup's", of)
		out = append(out, probeFamily{f, newDesc(sub, f.Name, help, append(append([]string(nil), labels...), f.Labels...)...)})
	}
	return out
}

func (p probeLevel) describe(ch chan<- *prometheus.Desc) {
	for _, f := range p {
		ch <- f.desc.prom
	}
}

// emit exports the families of the active probes for n things, the i-th
// with counters stats(i) (nil: none) and labels labels(i). A thing's
// family whose every series is zero is left out for that thing: one job
// that used the network used to give every job on the node eight network
// series of zeros (2,100 series of zeros for 200 jobs in the footprint
// harness). A family appears for a thing once it has counted something.
func (p probeLevel) emit(out *sink, on map[string]bool, n int, stats func(int) *reading.ProbeStats, labels func(int) []string) {
	for _, f := range p {
		if !on[f.Probe] {
			continue
		}
		for i := 0; i < n; i++ {
			st := stats(i)
			if st == nil || !f.any(1, func(int) *reading.ProbeStats { return st }) {
				continue
			}
			ls := labels(i)
			for _, s := range f.Series {
				out.addWith(f.desc, prometheus.CounterValue, s.Value(st), ls, s.Labels...)
			}
		}
	}
}

// any reports whether some series of the family is not zero.
func (f probeFamily) any(n int, stats func(int) *reading.ProbeStats) bool {
	for i := 0; i < n; i++ {
		if st := stats(i); st != nil {
			for _, s := range f.Series {
				if s.Value(st) != 0 {
					return true
				}
			}
		}
	}
	return false
}

// activeProbes is the set of probes that run.
func activeProbes(snap *snapshot.Snapshot) map[string]bool {
	on := make(map[string]bool, len(snap.Probes))
	for _, p := range snap.Probes {
		on[p] = true
	}
	return on
}

func newProbesCollector(perCgroup, softirq bool) *probesCollector {
	c := &probesCollector{
		active:             newDesc("probe", "active", "1 for each kernel probe that loaded and runs.", "probe"),
		perCgroup:          perCgroup,
		node:               newProbeLevel("node", "the node's", nil, true),
		perf:               newDesc("cgroup", "perf_events_total", "Perf counter events credited to the cgroup's tasks at context switches, scaled for multiplexing.", "cgroup", "counter"),
		nodeSoftirqs:       newDesc("node", "softirqs_total", "Softirqs run on the node by vector.", "vector"),
		nodeSoftirqSeconds: newDesc("node", "softirq_seconds_total", "Time spent in softirqs on the node by vector.", "vector"),
	}
	if perCgroup {
		c.cgroup = newProbeLevel("cgroup", "the cgroup's", []string{"cgroup"}, softirq)
	}
	return c
}

func (c *probesCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.active, c.perf, c.nodeSoftirqs, c.nodeSoftirqSeconds)
	c.node.describe(ch)
	c.cgroup.describe(ch)
}

func (c *probesCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	on := activeProbes(snap)
	for _, p := range snap.Probes {
		out.add(c.active, prometheus.GaugeValue, 1, p)
	}
	for _, v := range snap.Softirqs {
		out.add(c.nodeSoftirqs, prometheus.CounterValue, float64(v.Count), v.Name)
		out.add(c.nodeSoftirqSeconds, prometheus.CounterValue, float64(v.Ns)/1e9, v.Name)
	}
	aggs := aggregateProbes(snap.Cgroups)
	// The node's counters are its cgroups' sum: each task counts in one.
	var node reading.ProbeStats
	for _, a := range aggs {
		node.Add(a.stats)
	}
	if len(aggs) > 0 {
		c.node.emit(out, on, 1, func(int) *reading.ProbeStats { return &node }, func(int) []string { return nil })
	}
	if c.perCgroup {
		c.cgroup.emit(out, on, len(aggs), func(i int) *reading.ProbeStats { return &aggs[i].stats }, func(i int) []string { return []string{aggs[i].cgroup} })
	}
	if len(snap.Counters) == 0 {
		return nil
	}
	for _, a := range aggs {
		for i, name := range snap.Counters {
			if i < len(a.stats.Counters) {
				out.add(c.perf, prometheus.CounterValue, float64(a.stats.Counters[i]), a.cgroup, name)
			}
		}
	}
	return nil
}

type probeAgg struct {
	cgroup string
	stats  reading.ProbeStats
}

// aggregateProbes sums probe counters of workloads sharing a cgroup path
// (a re-created cgroup retained beside its successor), as the cgroup
// collector does for energy.
func aggregateProbes(ws []*snapshot.Consumer) []*probeAgg {
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
