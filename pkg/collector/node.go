package collector

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
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
	energy, power, unattributed, clamps *prometheus.Desc
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

func (c *nodeCollector) update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	for _, z := range snap.Zones {
		if z.Ended {
			// Its meter stands behind no figure of it now: the series
			// end rather than freeze under labels that claim it counts.
			continue
		}
		socket := socketLabel(z.Socket)
		m := method(z.Estimated)
		ch <- metric(c.energy, prometheus.CounterValue, z.IdleJ, z.Name, socket, z.Source, m, modeIdle)
		ch <- metric(c.energy, prometheus.CounterValue, z.DynamicJ, z.Name, socket, z.Source, m, modeDynamic)
		ch <- metric(c.power, prometheus.GaugeValue, z.PowerW, z.Name, socket, z.Source, m)
		ch <- metric(c.unattributed, prometheus.CounterValue, z.UnattributedJ, z.Name, socket, z.Source, m)
		ch <- metric(c.clamps, prometheus.CounterValue, float64(z.IdleClamps), z.Name, socket)
	}
	c.estimates.update(ch, snap.Estimates)
	return nil
}

func socketLabel(s int) string {
	if s < 0 {
		return socketNode
	}
	return strconv.Itoa(s)
}
