package collector

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// NameEmissions is the collector of grams of CO2e and the carbon-intensity
// factors they were priced at.
const NameEmissions = "emissions"

func init() {
	register(Registration{Name: NameEmissions,
		on:  func(o Options) bool { return o.Emissions },
		new: func(o Options) subCollector { return newEmissionsCollector(o) }})
}

// emissionsCollector exports, for every level the other collectors export
// energy for, the grams of CO2e of that energy: each interval's joules
// times the factor in force in that interval, by zone and mode as the
// energy, and by the provider whose factor priced them. The factors
// themselves are gauges per provider and grid zone ("grid_zone", because
// "zone" is the energy zone).
type emissionsCollector struct {
	node, nodeUnattributed, cgroup, process *desc
	levels                                  map[ident.Kind]*desc
	factor, age, up, reads, failed          *desc
	top                                     int
	idle, cgroupWorkloads                   bool
}

const gramsHelp = "Grams of CO2-equivalent of the energy attributed to the %s, each accounting interval's joules priced at the carbon intensity in force in that interval (exact, unlike a PromQL product of averages); zone and mode as for its energy_joules_total, provider is whose factor priced them."

func newEmissionsCollector(o Options) *emissionsCollector {
	help := func(what string) string { return fmt.Sprintf(gramsHelp, what) }
	c := &emissionsCollector{top: settingsOf[ProcessSettings](o, NameProcess).Top, idle: o.IdleAttributed,
		cgroupWorkloads: settingsOf[cgroupSettings](o, NameCgroup).Workloads, levels: map[ident.Kind]*desc{}}
	if o.Enabled[NameNode] {
		c.node = newDesc("node", "emissions_grams_total", "Grams of CO2-equivalent of the node's energy per zone, each accounting interval's joules priced at the carbon intensity in force in that interval; mode as for wattrace_node_energy_joules_total, provider is whose factor priced them. Zones overlap: do not sum across zones.", "zone", "socket", "mode", "provider")
		c.nodeUnattributed = newDesc("node", "unattributed_emissions_grams_total", "Grams of CO2-equivalent of wattrace_node_unattributed_joules_total: part of mode=\"dynamic\" of wattrace_node_emissions_grams_total.", "zone", "socket", "provider")
	}
	if o.Enabled[NameCgroup] {
		c.cgroup = newDesc("cgroup", "emissions_grams_total", help("tasks directly in the cgroup"), "cgroup", "zone", "mode", "provider")
	}
	if o.Enabled[NameProcess] {
		c.process = newDesc("process", "emissions_grams_total", help("process; the same top N processes as its energy are exported"), "pid", "comm", "cgroup", "zone", "mode", "provider")
	}
	for _, l := range o.Levels {
		labels := append(append([]string(nil), ident.LabelNames(l)...), "zone", "mode", "provider")
		c.levels[l] = newDesc(string(l), "emissions_grams_total", help(string(l)+", summed over its cgroups"), labels...)
	}
	gz := []string{"provider", "grid_zone"}
	c.factor = newDesc("emissions", "factor_grams_per_kwh", "Latest carbon intensity of electricity each configured provider gave for its grid zone, in grams of CO2-equivalent per kWh.", gz...)
	c.age = newDesc("emissions", "factor_age_seconds", "Age of the provider's factor: since the moment it describes when the provider dates it, else since its last good read; 0 for constant and static factors.", gz...)
	c.up = newDesc("emissions", "factor_up", "1 if the provider's latest read succeeded.", gz...)
	c.reads = newDesc("emissions", "provider_reads_total", "Reads of the carbon-intensity provider.", "provider")
	c.failed = newDesc("emissions", "provider_read_errors_total", "Reads of the carbon-intensity provider that failed, timed out or were rejected; its last good factor stays in use.", "provider")
	return c
}

func (c *emissionsCollector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*desc{c.node, c.nodeUnattributed, c.cgroup, c.process} {
		if d != nil {
			ch <- d.prom
		}
	}
	for _, d := range c.levels {
		ch <- d.prom
	}
	describeAll(ch, c.factor, c.age, c.up, c.reads, c.failed)
}

func (c *emissionsCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	if c.node != nil {
		// The node's grams have no source or method label: a zone that
		// changed source (a series per label set, each priced on its
		// own) is one counter per zone, socket and provider, the sum
		// over its series, so it goes on across the change.
		type key struct {
			id       reading.ZoneID
			provider string
		}
		var order []key
		sums := map[key]*snapshot.NodeGrams{}
		for _, z := range snap.Zones {
			for _, g := range z.Grams {
				k := key{z.ZoneID, g.Provider}
				s := sums[k]
				if s == nil {
					s = &snapshot.NodeGrams{Provider: g.Provider}
					sums[k] = s
					order = append(order, k)
				}
				s.IdleG += g.IdleG
				s.DynamicG += g.DynamicG
				s.UnattributedG += g.UnattributedG
			}
		}
		for _, k := range order {
			g, socket := sums[k], socketLabel(k.id.Socket)
			out.add(c.node, prometheus.CounterValue, g.IdleG, k.id.Name, socket, modeIdle, g.Provider)
			out.add(c.node, prometheus.CounterValue, g.DynamicG, k.id.Name, socket, modeDynamic, g.Provider)
			out.add(c.nodeUnattributed, prometheus.CounterValue, g.UnattributedG, k.id.Name, socket, g.Provider)
		}
	}
	if c.cgroup != nil {
		for _, a := range mergeGrams(snap.Cgroups, false, nil, !c.cgroupWorkloads) {
			emitGrams(out, c.cgroup, a.grams, c.idle, a.key.cgroup)
		}
	}
	if c.process != nil {
		// The same series as the process collector's: its top N by energy.
		var keep keySet
		if c.top > 0 {
			keep = keySet{}
			for _, a := range topN(aggregate(candidates(snap.Processes, c.top), true), c.top) {
				keep.add(a.key)
			}
		}
		for _, a := range mergeGrams(snap.Processes, true, keep, false) {
			emitGrams(out, c.process, a.grams, c.idle, strconv.FormatUint(uint64(a.key.pid), 10), a.key.comm, a.key.cgroup)
		}
	}
	for i := range snap.Workloads {
		u := &snap.Workloads[i]
		if d, ok := c.levels[ident.Kind(u.Level)]; ok {
			emitGrams(out, d, u.Grams, c.idle, u.Labels...)
		}
	}
	for _, in := range snap.Intensities {
		up := 0.0
		if in.Up {
			up = 1
		}
		out.add(c.factor, prometheus.GaugeValue, in.GramsPerKWh, in.Provider, in.Zone)
		out.add(c.age, prometheus.GaugeValue, in.Age.Seconds(), in.Provider, in.Zone)
		out.add(c.up, prometheus.GaugeValue, up, in.Provider, in.Zone)
	}
	for _, h := range snap.Carbon {
		p := providerOf(h.Source)
		out.add(c.reads, prometheus.CounterValue, float64(h.Reads), p)
		out.add(c.failed, prometheus.CounterValue, float64(h.Errors), p)
	}
	return nil
}

// providerOf strips the "carbon/" of a provider's source name.
func providerOf(source string) string {
	const prefix = "carbon/"
	if len(source) > len(prefix) && source[:len(prefix)] == prefix {
		return source[len(prefix):]
	}
	return source
}

type gramsAgg struct {
	key   seriesKey
	grams snapshot.Emissions
	owned bool // grams is a copy this aggregate may modify
}

// mergeGrams sums consumers' grams by label set, as aggregate does their
// energy; keep, when not nil, selects the process label sets to export;
// inWorkloads leaves out the cgroups exported at a workload level.
func mergeGrams(ws []*snapshot.Consumer, withProcess bool, keep keySet, inWorkloads bool) []*gramsAgg {
	n := len(ws)
	if keep != nil {
		n = len(keep)
	}
	idx := make(map[seriesKey]*gramsAgg, n)
	out := make([]*gramsAgg, 0, n)
	for _, w := range ws {
		if inWorkloads && w.InWorkload {
			continue
		}
		if keep != nil && !keep.has(w) {
			continue
		}
		k := seriesKey{cgroup: w.Cgroup}
		if withProcess {
			k.pid, k.comm = w.PID, w.Comm
		}
		a := idx[k]
		if a == nil {
			// Share the snapshot's slice (immutable, and sorted as Add
			// keeps it); copy only if a second consumer is merged in.
			a = &gramsAgg{key: k, grams: w.Grams}
			idx[k] = a
			out = append(out, a)
			continue
		}
		if !a.owned {
			a.grams, a.owned = append(snapshot.Emissions(nil), a.grams...), true
		}
		for _, g := range w.Grams {
			a.grams = a.grams.Add(g.Provider, g.Zone, g.DynamicG, g.IdleG)
		}
	}
	return out
}

// emitGrams sends one consumer's or workload's grams; labels are its own
// label values, followed by zone, mode and provider.
func emitGrams(out *sink, d *desc, e snapshot.Emissions, idle bool, labels ...string) {
	for _, g := range e {
		out.addWith(d, prometheus.CounterValue, g.DynamicG, labels, g.Zone, modeDynamic, g.Provider)
		if idle {
			out.addWith(d, prometheus.CounterValue, g.IdleG, labels, g.Zone, modeIdle, g.Provider)
		}
	}
}
