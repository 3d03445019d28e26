package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// seriesKey is the label set of one cgroup or process series. Distinct
// consumers can share it: a cgroup removed and re-created under the same
// path, or a PID reused with the same comm while the old process is still
// retained. Their counters are summed, which keeps the series monotonic
// while both are retained; without merging the registry would reject the
// scrape for duplicate series.
type seriesKey struct {
	pid    uint32
	comm   string
	cgroup string
}

type seriesAgg struct {
	key        seriesKey
	cpuSeconds float64
	switches   uint64
	energy     snapshot.Energy
	total      float64 // Σ zones (dynamic+idle), for ranking
	owned      bool    // energy is a copy this aggregate may modify
}

// aggregate merges consumers by label set. withProcess selects whether pid
// and comm are part of the key.
func aggregate(ws []*snapshot.Consumer, withProcess bool) []*seriesAgg {
	return aggregateExcept(ws, withProcess, false)
}

// aggregateExcept is aggregate leaving out, when inWorkloads is set, the
// cgroups exported at a workload level (snapshot.Consumer.InWorkload).
func aggregateExcept(ws []*snapshot.Consumer, withProcess, inWorkloads bool) []*seriesAgg {
	idx := make(map[seriesKey]*seriesAgg, len(ws))
	out := make([]*seriesAgg, 0, len(ws))
	for _, w := range ws {
		if inWorkloads && w.InWorkload {
			continue
		}
		k := seriesKey{cgroup: w.Cgroup}
		if withProcess {
			k.pid, k.comm = w.PID, w.Comm
		}
		a := idx[k]
		if a == nil {
			// Share the snapshot's slice (it is immutable); copy only if
			// a second workload has to be merged in.
			a = &seriesAgg{key: k, cpuSeconds: w.CPUSeconds, switches: w.ContextSwitches, energy: w.Energy}
			for _, e := range w.Energy {
				a.total += e.DynamicJ + e.IdleJ
			}
			idx[k] = a
			out = append(out, a)
			continue
		}
		if !a.owned {
			a.energy, a.owned = append(snapshot.Energy(nil), a.energy...), true
		}
		a.cpuSeconds += w.CPUSeconds
		a.switches += w.ContextSwitches
		for _, e := range w.Energy {
			a.energy = a.energy.Add(e.Series(), e.DynamicJ, e.IdleJ)
			a.total += e.DynamicJ + e.IdleJ
		}
	}
	return out
}

// emitEnergy sends one workload's energy series, one per zone series (a
// zone that changed source or method has one per label set it had, each
// with its own joules); labels are the workload's own label values,
// followed by zone, source, method and mode.
func emitEnergy(out *sink, d *desc, a *seriesAgg, zl zoneLabels, idle bool, labels ...string) {
	for _, e := range zl.label(a.energy) { // sorted by zone
		z, src, m := e.Zone, e.Source, method(e.Estimated)
		out.addWith(d, prometheus.CounterValue, e.DynamicJ, labels, z, src, m, modeDynamic)
		if idle {
			out.addWith(d, prometheus.CounterValue, e.IdleJ, labels, z, src, m, modeIdle)
		}
	}
}
