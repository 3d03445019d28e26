package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/snapshot"
)

// NameCgroup is the collector of per-cgroup series.
const NameCgroup = "cgroup"

func init() {
	register(withSettings(Registration{Name: NameCgroup, Flag: true, DefaultOn: true,
		Help: "Enable the cgroup collector (energy, CPU time, context switches per cgroup).",
		new: func(o Options) subCollector {
			return newCgroupCollector(o.IdleAttributed, settingsOf[cgroupSettings](o, NameCgroup).Workloads)
		}}, func(s *setting.Set, o *cgroupSettings) {
		s.Bool(&o.Workloads, "collector.cgroup.workloads", false, "Export the cgroup families (energy, CPU, context switches, grams) also for cgroups that belong to a container, pod, VM, job or unit at an exported level; by default such a cgroup is exported once, at its workload's level.")
	}))
}

// cgroupSettings are the cgroup collector's own settings.
type cgroupSettings struct {
	// Workloads exports the cgroup families (energy, CPU, grams) also for
	// cgroups that belong to a workload at an exported level; by default
	// those are exported at the workload level only (the emissions
	// collector follows it).
	Workloads bool
}

// cgroupCollector exports energy and CPU usage per cgroup of the key
// hierarchy. Counters cover tasks directly in the cgroup, not descendants,
// so summing over cgroups never counts a task twice. A cgroup that belongs
// to a workload at an exported level is exported at that level only,
// unless workloads is set (collector.cgroup.workloads): its series would
// repeat the workload's.
type cgroupCollector struct {
	energy, cpu, switches *desc
	idle, workloads       bool
}

func newCgroupCollector(idleAttributed, workloads bool) *cgroupCollector {
	return &cgroupCollector{
		idle:      idleAttributed,
		workloads: workloads,
		energy:    newDesc("cgroup", "energy_joules_total", "Energy attributed to the tasks directly in the cgroup. mode=\"dynamic\" is its share of the energy above idle; mode=\"idle\" its share of idle energy under the idle policy (exported only when the policy is not none).", "cgroup", "zone", "source", "method", "mode"),
		cpu:       newDesc("cgroup", "cpu_seconds_total", "CPU time used by the tasks directly in the cgroup, exited tasks included.", "cgroup"),
		switches:  newDesc("cgroup", "context_switches_total", "Voluntary and involuntary context switches of the tasks directly in the cgroup.", "cgroup"),
	}
}

func (c *cgroupCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.energy, c.cpu, c.switches)
}

func (c *cgroupCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	zl := newZoneLabels(snap.Zones)
	for _, a := range aggregateExcept(snap.Cgroups, false, !c.workloads) {
		cg := a.key.cgroup
		emitEnergy(out, c.energy, a, zl, c.idle, cg)
		out.add(c.cpu, prometheus.CounterValue, a.cpuSeconds, cg)
		out.add(c.switches, prometheus.CounterValue, float64(a.switches), cg)
	}
	return nil
}
