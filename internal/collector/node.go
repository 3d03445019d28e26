package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// NameNode is the collector of the node's zones.
const NameNode = "node"

func init() {
	register(Registration{Name: NameNode, Flag: true, DefaultOn: true,
		Help: "Enable the node collector (zone energy and power).",
		new:  func(Options) subCollector { return newNodeCollector() }})
}

// nodeCollector exports the node's energy per zone and socket.
type nodeCollector struct {
	energy, power, unattributed, clamps *desc
	estimates                           estimateFamilies
}

func newNodeCollector() *nodeCollector {
	zoneLabels := []string{"zone", "socket", "source", "method"}
	return &nodeCollector{
		energy:       newDesc("node", "energy_joules_total", "Energy the node used since the exporter started, split into idle and dynamic (mode). sum without(mode) is the zone's energy. Zones overlap (psys contains package, package contains core), so do not sum across zones.", append(zoneLabels, "mode")...),
		power:        newDesc("node", "power_watts", "Mean power of the zone over the last accounting interval.", zoneLabels...),
		unattributed: newDesc("node", "unattributed_joules_total", "Dynamic energy of intervals in which no workload used the CPU, so it could not be split among workloads.", zoneLabels...),
		estimates:    newEstimateFamilies(),
		clamps:       newDesc("node", "idle_clamps_total", "Intervals in which the idle model exceeded the measured energy and idle was clamped to it. A rising rate means the idle power is set too high.", "zone", "socket"),
	}
}

func (c *nodeCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.energy, c.power, c.unattributed, c.clamps)
	c.estimates.describe(ch)
}

func (c *nodeCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	// A zone that changed source or method has a series per label set;
	// the clamps are the zone's, whichever series was current: one
	// counter per zone and socket, summed over its series.
	var clamps []zoneCount
	for _, z := range snap.Zones {
		if z.Ended {
			// Its meter stands behind no figure of it now: the series
			// end rather than freeze under labels that claim it counts.
			continue
		}
		socket := socketLabel(z.Socket)
		m := method(z.Estimated)
		out.add(c.energy, prometheus.CounterValue, z.IdleJ, z.Name, socket, z.Source, m, modeIdle)
		out.add(c.energy, prometheus.CounterValue, z.DynamicJ, z.Name, socket, z.Source, m, modeDynamic)
		out.add(c.power, prometheus.GaugeValue, z.PowerW, z.Name, socket, z.Source, m)
		out.add(c.unattributed, prometheus.CounterValue, z.UnattributedJ, z.Name, socket, z.Source, m)
		clamps = addCount(clamps, z.ZoneID, float64(z.IdleClamps))
	}
	for _, n := range clamps {
		out.add(c.clamps, prometheus.CounterValue, n.v, n.id.Name, socketLabel(n.id.Socket))
	}
	c.estimates.update(out, snap.Estimates)
	return nil
}

func socketLabel(s int) string {
	if s < 0 {
		return socketNode
	}
	return strconv.Itoa(s)
}

// zoneCount is a figure of one zone and socket summed over the zone's
// series (families without source and method labels).
type zoneCount struct {
	id reading.ZoneID
	v  float64
}

// addCount adds v to id's count, in the order zones first appear (a node
// has a handful: a slice beats a map).
func addCount(cs []zoneCount, id reading.ZoneID, v float64) []zoneCount {
	for i := range cs {
		if cs[i].id == id {
			cs[i].v += v
			return cs
		}
	}
	return append(cs, zoneCount{id: id, v: v})
}
