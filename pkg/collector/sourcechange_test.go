package collector

import (
	"testing"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/snapshot"
)

// The node's families without source and method labels (grams, idle
// clamps) are one counter per zone and socket across a source change: the
// sum over the zone's series, each priced or counted while it was current.
// A series each would send one label set twice and the scrape would lose
// one of them.
func TestNodeFamiliesWithoutSourceSumTheZonesSeries(t *testing.T) {
	pkg := reading.ZoneID{Name: "package", Socket: -1}
	snap := &snapshot.Snapshot{Zones: []snapshot.Zone{
		{ZoneID: pkg, Source: "estimator", Estimated: true, EnergyJ: 16, IdleJ: 4, DynamicJ: 12, IdleClamps: 1,
			Grams: []snapshot.NodeGrams{{Provider: "constant", IdleG: 0.5, DynamicG: 1.5}}},
		{ZoneID: pkg, Source: "host:hv1", EnergyJ: 46, IdleJ: 6, DynamicJ: 40, IdleClamps: 2,
			Grams: []snapshot.NodeGrams{{Provider: "constant", IdleG: 1, DynamicG: 4, UnattributedG: 0.25}}},
	}}
	e := newExporter(t, snap, Options{Enabled: on(NameNode), Emissions: true})
	gatherCompare(t, e, `
# HELP wattrace_node_idle_clamps_total Intervals in which the idle model exceeded the measured energy and idle was clamped to it. A rising rate means the idle power is set too high.
# TYPE wattrace_node_idle_clamps_total counter
wattrace_node_idle_clamps_total{socket="node",zone="package"} 3
# HELP wattrace_node_emissions_grams_total Grams of CO2-equivalent of the node's energy per zone, each accounting interval's joules priced at the carbon intensity in force in that interval; mode as for wattrace_node_energy_joules_total, provider is whose factor priced them. Zones overlap: do not sum across zones.
# TYPE wattrace_node_emissions_grams_total counter
wattrace_node_emissions_grams_total{mode="dynamic",provider="constant",socket="node",zone="package"} 5.5
wattrace_node_emissions_grams_total{mode="idle",provider="constant",socket="node",zone="package"} 1.5
# HELP wattrace_node_unattributed_emissions_grams_total Grams of CO2-equivalent of wattrace_node_unattributed_joules_total: part of mode="dynamic" of wattrace_node_emissions_grams_total.
# TYPE wattrace_node_unattributed_emissions_grams_total counter
wattrace_node_unattributed_emissions_grams_total{provider="constant",socket="node",zone="package"} 0.25
`, "wattrace_node_idle_clamps_total", "wattrace_node_emissions_grams_total", "wattrace_node_unattributed_emissions_grams_total")
}
