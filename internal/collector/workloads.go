package collector

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// NameWorkloads is the collector of the workload levels (container, pod,
// vm, job, unit), each enabled by its own --collector.<level> flag.
const NameWorkloads = "workloads"

func init() {
	register(Registration{Name: NameWorkloads,
		on: func(o Options) bool { return len(o.Levels) > 0 },
		new: func(o Options) subCollector {
			return newWorkloadsCollector(o.Levels, o.IdleAttributed, o.Enabled[NameProbes], settingsOf[probesSettings](o, NameProbes).SoftirqWorkloads)
		}})
}

type levelDescs struct {
	energy, cpu, switches *desc
	res                   resourceDescs
	probes                probeLevel
}

// workloadsCollector exports energy and CPU per workload at each enabled level:
// the sum over the cgroups the workload owns, with the level's labels (see
// pkg/workload for the scheme), and how many of each are running.
type workloadsCollector struct {
	levels  map[ident.Kind]levelDescs
	running *desc
	idle    bool
}

// newWorkloadsCollector builds the levels' families; with probes, each
// level also gets the probe families (wattrace_<level>_page_cache_…), the
// softirq_interrupted ones only with softirq: a softirq is counted against
// whichever task it interrupted, not work done for it, so per workload it
// is two series of noise per job or pod unless asked for.
func newWorkloadsCollector(levels []ident.Kind, idleAttributed, probes, softirq bool) *workloadsCollector {
	c := &workloadsCollector{
		levels:  map[ident.Kind]levelDescs{},
		idle:    idleAttributed,
		running: newDesc("units", "running", "Workloads at each level with at least one live cgroup, per manager.", "level", "manager"),
	}
	for _, l := range levels {
		labels := ident.LabelNames(l)
		sub := string(l)
		c.levels[l] = levelDescs{
			energy: newDesc(sub, "energy_joules_total", "Energy attributed to the "+sub+", summed over its cgroups; mode as for wattrace_cgroup_energy_joules_total.",
				append(append([]string(nil), labels...), "zone", "source", "method", "mode")...),
			cpu:      newDesc(sub, "cpu_seconds_total", "CPU time of the "+sub+"'s tasks, exited ones included.", labels...),
			switches: newDesc(sub, "context_switches_total", "Voluntary and involuntary context switches of the "+sub+"'s tasks.", labels...),
			res:      newResourceDescs(sub, labels),
		}
		if probes {
			d := c.levels[l]
			d.probes = newProbeLevel(sub, "the "+sub+"'s", labels, softirq)
			c.levels[l] = d
		}
	}
	return c
}

func (c *workloadsCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.running.prom
	for _, d := range c.levels {
		describeAll(ch, d.energy, d.cpu, d.switches)
		d.res.describe(ch)
		d.probes.describe(ch)
	}
}

func (c *workloadsCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	zl := newZoneLabels(snap.Zones)
	show := map[string]reading.ResourceField{}
	for i := range snap.Workloads {
		if r := snap.WorkloadResources(i); r != nil {
			show[snap.Workloads[i].Level] |= nonZero(r)
		}
	}
	type lm struct{ level, manager string }
	running := map[lm]int{}
	for i := range snap.Workloads {
		u := &snap.Workloads[i]
		d, ok := c.levels[ident.Kind(u.Level)]
		if !ok {
			continue
		}
		if u.Alive {
			running[lm{u.Level, u.Manager}]++
		}
		emitEnergy(out, d.energy, &seriesAgg{energy: u.Energy}, zl, c.idle, u.Labels...)
		out.addWith(d.cpu, prometheus.CounterValue, u.CPUSeconds, u.Labels)
		out.addWith(d.switches, prometheus.CounterValue, float64(u.ContextSwitches), u.Labels)
		if r := snap.WorkloadResources(i); r != nil {
			d.res.emit(out, r, show[u.Level], u.Labels)
		}
	}
	if len(snap.Probes) > 0 {
		c.emitProbes(out, snap)
	}
	keys := make([]lm, 0, len(running))
	for k := range running {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].level != keys[j].level {
			return keys[i].level < keys[j].level
		}
		return keys[i].manager < keys[j].manager
	})
	for _, k := range keys {
		out.add(c.running, prometheus.GaugeValue, float64(running[k]), k.level, k.manager)
	}
	return nil
}

// emitProbes exports each level's probe families over its workloads.
func (c *workloadsCollector) emitProbes(out *sink, snap *snapshot.Snapshot) {
	on := activeProbes(snap)
	byLevel := map[ident.Kind][]*snapshot.Workload{}
	for i := range snap.Workloads {
		u := &snap.Workloads[i]
		if d, ok := c.levels[ident.Kind(u.Level)]; ok && d.probes != nil && u.Probes != nil {
			byLevel[ident.Kind(u.Level)] = append(byLevel[ident.Kind(u.Level)], u)
		}
	}
	for l, us := range byLevel {
		c.levels[l].probes.emit(out, on, len(us), func(i int) *reading.ProbeStats { return us[i].Probes },
			func(i int) []string { return us[i].Labels })
	}
}
