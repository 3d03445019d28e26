package collector

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// withEmissions gives testSnapshot grams under two providers (the chain
// fell back once), the factors and the providers' health.
func withEmissions(s *snapshot.Snapshot) *snapshot.Snapshot {
	s.Zones[0].Grams = []snapshot.NodeGrams{{Provider: "constant", DynamicG: 0.5, IdleG: 1, UnattributedG: 0.1},
		{Provider: "rte", DynamicG: 2, IdleG: 4, UnattributedG: 0.25}}
	for i := range s.Cgroups {
		s.Cgroups[i].Grams = snapshot.Emissions{{Provider: "rte", Zone: "package", DynamicG: 1, IdleG: 0.5}}
	}
	for i := range s.Processes {
		s.Processes[i].Grams = snapshot.Emissions{{Provider: "rte", Zone: "package", DynamicG: float64(s.Processes[i].PID) / 100}}
	}
	for i := range s.Workloads {
		s.Workloads[i].Grams = snapshot.Emissions{{Provider: "constant", Zone: "package", DynamicG: 0.125},
			{Provider: "rte", Zone: "package", DynamicG: 3, IdleG: 0.25}}
	}
	s.Intensities = []reading.Intensity{{Provider: "rte", Zone: "FR", GramsPerKWh: 32, Age: 20 * time.Minute, Up: true},
		{Provider: "constant", Zone: "world", GramsPerKWh: 436, Up: true}}
	s.Carbon = []reading.SourceHealth{{Source: "carbon/rte", Up: true, Reads: 12, Errors: 3, Rejected: map[string]uint64{"out_of_range": 2}},
		{Source: "carbon/constant", Up: true, Reads: 1}}
	return s
}

// Grams series carry the snapshot's values by zone, mode and provider:
// merged cgroups sum, processes follow the process collector's top N, idle
// is exported only when attributed; factors per provider and grid zone.
// A scrape leaves the snapshot as it found it (a merged series' sum is
// the scrape's own copy), so the next scrape of it says the same.
func TestEmissionsCollector(t *testing.T) {
	snap := withEmissions(testSnapshot())
	e := newExporter(t, snap, Options{Enabled: on(NameNode, NameCgroup, NameProcess),
		Settings: Settings{NameProcess: &ProcessSettings{Top: 2}}, Levels: []ident.Kind{ident.KindJob}, Emissions: true})
	for range 2 {
		scrapeEmissions(t, e)
	}
	for _, w := range snap.Cgroups {
		if len(w.Grams) != 1 || w.Grams[0].DynamicG != 1 {
			t.Errorf("cgroup %s's grams in the snapshot became %+v", w.Cgroup, w.Grams)
		}
	}
}

func scrapeEmissions(t *testing.T, e *Exporter) {
	t.Helper()
	gatherCompare(t, e, `
# HELP wattrace_node_emissions_grams_total Grams of CO2-equivalent of the node's energy per zone, each accounting interval's joules priced at the carbon intensity in force in that interval; mode as for wattrace_node_energy_joules_total, provider is whose factor priced them. Zones overlap: do not sum across zones.
# TYPE wattrace_node_emissions_grams_total counter
wattrace_node_emissions_grams_total{mode="dynamic",provider="constant",socket="0",zone="package"} 0.5
wattrace_node_emissions_grams_total{mode="dynamic",provider="rte",socket="0",zone="package"} 2
wattrace_node_emissions_grams_total{mode="idle",provider="constant",socket="0",zone="package"} 1
wattrace_node_emissions_grams_total{mode="idle",provider="rte",socket="0",zone="package"} 4
# HELP wattrace_node_unattributed_emissions_grams_total Grams of CO2-equivalent of wattrace_node_unattributed_joules_total: part of mode="dynamic" of wattrace_node_emissions_grams_total.
# TYPE wattrace_node_unattributed_emissions_grams_total counter
wattrace_node_unattributed_emissions_grams_total{provider="constant",socket="0",zone="package"} 0.1
wattrace_node_unattributed_emissions_grams_total{provider="rte",socket="0",zone="package"} 0.25
# HELP wattrace_cgroup_emissions_grams_total Grams of CO2-equivalent of the energy attributed to the tasks directly in the cgroup, each accounting interval's joules priced at the carbon intensity in force in that interval (exact, unlike a PromQL product of averages); zone and mode as for its energy_joules_total, provider is whose factor priced them.
# TYPE wattrace_cgroup_emissions_grams_total counter
wattrace_cgroup_emissions_grams_total{cgroup="/",mode="dynamic",provider="rte",zone="package"} 1
wattrace_cgroup_emissions_grams_total{cgroup="/system.slice/a.service",mode="dynamic",provider="rte",zone="package"} 2
# HELP wattrace_process_emissions_grams_total Grams of CO2-equivalent of the energy attributed to the process; the same top N processes as its energy are exported, each accounting interval's joules priced at the carbon intensity in force in that interval (exact, unlike a PromQL product of averages); zone and mode as for its energy_joules_total, provider is whose factor priced them.
# TYPE wattrace_process_emissions_grams_total counter
wattrace_process_emissions_grams_total{cgroup="/user.slice",comm="big",mode="dynamic",pid="200",provider="rte",zone="package"} 2
wattrace_process_emissions_grams_total{cgroup="/user.slice",comm="bad�name",mode="dynamic",pid="400",provider="rte",zone="package"} 4
# HELP wattrace_job_emissions_grams_total Grams of CO2-equivalent of the energy attributed to the job, summed over its cgroups, each accounting interval's joules priced at the carbon intensity in force in that interval (exact, unlike a PromQL product of averages); zone and mode as for its energy_joules_total, provider is whose factor priced them.
# TYPE wattrace_job_emissions_grams_total counter
wattrace_job_emissions_grams_total{job_id="42",mode="dynamic",provider="constant",sluid="",slurm_node="n1",uid="1000",user="alice",zone="package"} 0.125
wattrace_job_emissions_grams_total{job_id="42",mode="dynamic",provider="rte",sluid="",slurm_node="n1",uid="1000",user="alice",zone="package"} 3
wattrace_job_emissions_grams_total{job_id="43",mode="dynamic",provider="constant",sluid="sEKNKTV3WPV500",slurm_node="n1",uid="1001",user="bob",zone="package"} 0.125
wattrace_job_emissions_grams_total{job_id="43",mode="dynamic",provider="rte",sluid="sEKNKTV3WPV500",slurm_node="n1",uid="1001",user="bob",zone="package"} 3
# HELP wattrace_emissions_factor_grams_per_kwh Latest carbon intensity of electricity each configured provider gave for its grid zone, in grams of CO2-equivalent per kWh.
# TYPE wattrace_emissions_factor_grams_per_kwh gauge
wattrace_emissions_factor_grams_per_kwh{grid_zone="FR",provider="rte"} 32
wattrace_emissions_factor_grams_per_kwh{grid_zone="world",provider="constant"} 436
# HELP wattrace_emissions_factor_age_seconds Age of the provider's factor: since the moment it describes when the provider dates it, else since its last good read; 0 for constant and static factors.
# TYPE wattrace_emissions_factor_age_seconds gauge
wattrace_emissions_factor_age_seconds{grid_zone="FR",provider="rte"} 1200
wattrace_emissions_factor_age_seconds{grid_zone="world",provider="constant"} 0
# HELP wattrace_emissions_provider_read_errors_total Reads of the carbon-intensity provider that failed, timed out or were rejected; its last good factor stays in use.
# TYPE wattrace_emissions_provider_read_errors_total counter
wattrace_emissions_provider_read_errors_total{provider="constant"} 0
wattrace_emissions_provider_read_errors_total{provider="rte"} 3
# HELP wattrace_source_rejected_readings_total Readings a source gave that validation refused (not finite, out of range, a counter going backwards), by reason; they were never credited. Any increase means a meter or file is misbehaving.
# TYPE wattrace_source_rejected_readings_total counter
wattrace_source_rejected_readings_total{reason="backwards",source="redfish"} 1
wattrace_source_rejected_readings_total{reason="not_finite",source="redfish"} 2
wattrace_source_rejected_readings_total{reason="out_of_range",source="carbon/rte"} 2
`, "wattrace_node_emissions_grams_total", "wattrace_node_unattributed_emissions_grams_total", "wattrace_cgroup_emissions_grams_total",
		"wattrace_process_emissions_grams_total", "wattrace_job_emissions_grams_total", "wattrace_emissions_factor_grams_per_kwh",
		"wattrace_emissions_factor_age_seconds", "wattrace_emissions_provider_read_errors_total", "wattrace_source_rejected_readings_total")
}
