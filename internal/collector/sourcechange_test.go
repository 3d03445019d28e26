package collector

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// standInMeter is a guest's node meter: the host's share, the estimator
// standing in while it is stale, the host again; each sample names the
// source and method of the moment, as hostshare's does.
type standInMeter struct {
	j              float64
	source, method string
}

func (m *standInMeter) Name() string    { return "host" }
func (m *standInMeter) Estimated() bool { return false }
func (m *standInMeter) Read(_ context.Context) ([]reading.ZoneSample, error) {
	return []reading.ZoneSample{{Zone: "package", Socket: -1, Joules: m.j, Source: m.source, Method: m.method}}, nil
}

// A workload's energy series follow their zone's: when the node's package
// zone goes from the host's measured figures to the estimator and back,
// each (workload, zone, source, method) series counts only the energy split
// from the node series of the same labels, from zero when it is new, and
// stops where it was when the zone leaves it. Exact joules per exported
// series, for two systemd units (3:1 CPU time, idle split evenly) and their
// cgroups; per zone the series of each workload sum to what it was given,
// and the workloads' series of one label set to the node's.
func TestWorkloadSeriesPerSourceAndMethod(t *testing.T) {
	mount := t.TempDir()
	src := &treeSource{}
	units := []string{"a.service", "b.service"}
	for _, u := range units {
		dir := filepath.Join(mount, "system.slice", u)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(dir)
		if err != nil {
			t.Fatal(err)
		}
		src.ids = append(src.ids, inodeOf(t, st))
		src.ns = append(src.ns, 0)
	}
	res := cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.V2, Mount: mount})
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir(), CgroupRoot: mount})
	m := &standInMeter{source: "host:hv1", method: reading.MethodMeasured}
	loop, err := stats.New(stats.Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "even", CPUs: 2,
		IdleWatts: map[string]float64{"package": 2}}, src, m, res, nil, stats.WithWorkloads(ids, ident.Levels()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	loop.Step(now)
	// Each second a.service runs 0.3 s and b.service 0.1 s; the meter's
	// cumulative reading grows by j under the labels of the moment. 2 J
	// of each second is idle (1 J to each unit), the rest split 3:1.
	steps := []struct {
		j              float64
		source, method string
	}{
		{10, "host:hv1", reading.MethodMeasured},
		{22, "host:hv1", reading.MethodMeasured},
		{6, "estimator", reading.MethodEstimated}, // the share went stale
		{10, "estimator", reading.MethodEstimated},
		{0, "host:hv1", reading.MethodMeasured}, // the host is back: a fresh baseline
		{14, "host:hv1", reading.MethodMeasured},
	}
	for _, st := range steps {
		now = now.Add(time.Second)
		src.ns[0] += 3e8
		src.ns[1] += 1e8
		m.j += st.j
		m.source, m.method = st.source, st.method
		loop.Step(now)
	}

	e, err := New(loop, Options{Levels: ident.Levels(), Enabled: map[string]bool{NameCgroup: true, NameNode: true},
		IdleAttributed: true, Settings: Settings{NameCgroup: &cgroupSettings{Workloads: true}}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		byName[mf.GetName()] = mf
	}

	// What each unit is owed per label set: measured 10+22+0+14 J (idle
	// 2+2+0+2: the host's first figure after its return is its baseline),
	// estimated 6+10 J (idle 2+2).
	type key struct{ who, source, method, mode string }
	want := map[key]float64{
		{"a.service", "host:hv1", "measured", "idle"}:      3,
		{"a.service", "host:hv1", "measured", "dynamic"}:   30, // (8+20+0+12)·3/4
		{"a.service", "estimator", "estimated", "idle"}:    2,
		{"a.service", "estimator", "estimated", "dynamic"}: 9, // (4+8)·3/4
		{"b.service", "host:hv1", "measured", "idle"}:      3,
		{"b.service", "host:hv1", "measured", "dynamic"}:   10,
		{"b.service", "estimator", "estimated", "idle"}:    2,
		{"b.service", "estimator", "estimated", "dynamic"}: 3,
	}
	check := func(family, whoLabel string, who func(string) string) {
		t.Helper()
		got := map[key]float64{}
		for _, s := range byName[family].GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["zone"] != "package" {
				continue
			}
			k := key{who(l[whoLabel]), l["source"], l["method"], l["mode"]}
			if _, dup := got[k]; dup {
				t.Errorf("%s: %+v exported twice", family, k)
			}
			got[k] = s.GetCounter().GetValue()
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || math.Abs(g-w) > 1e-9 {
				t.Errorf("%s{%s=%q,source=%q,method=%q,mode=%q} = %v (exported %v), want %v", family, whoLabel, k.who, k.source, k.method, k.mode, g, ok, w)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d package series, want %d (one per unit, source, method and mode): %v", family, len(got), len(want), got)
		}
	}
	check("wattrace_unit_energy_joules_total", "unit", func(v string) string { return v })
	check("wattrace_cgroup_energy_joules_total", "cgroup", func(v string) string { return strings.TrimPrefix(v, "/system.slice/") })

	// The node's series of each label set hold what its workloads hold.
	node := map[[2]string]float64{}
	for _, s := range byName["wattrace_node_energy_joules_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range s.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["zone"] == "package" {
			node[[2]string{l["source"], l["method"]}] += s.GetCounter().GetValue()
		}
	}
	wantNode := map[[2]string]float64{{"host:hv1", "measured"}: 46, {"estimator", "estimated"}: 16}
	for k, w := range wantNode {
		if math.Abs(node[k]-w) > 1e-9 {
			t.Errorf("wattrace_node_energy_joules_total{zone=\"package\",source=%q,method=%q} = %v, want %v", k[0], k[1], node[k], w)
		}
	}
	// The power of the zone is the current series' (14 J in the last
	// second); the series the zone left draws nothing.
	for _, s := range byName["wattrace_node_power_watts"].GetMetric() {
		l := map[string]string{}
		for _, p := range s.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		want := map[string]float64{"host:hv1": 14, "estimator": 0}[l["source"]]
		if got := s.GetGauge().GetValue(); l["zone"] == "package" && got != want {
			t.Errorf("wattrace_node_power_watts{source=%q,method=%q} = %v W, want %v", l["source"], l["method"], got, want)
		}
	}
}

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
