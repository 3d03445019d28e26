package collector

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/version"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

type fixedSource struct{ snap *snapshot.Snapshot }

func (f fixedSource) Snapshot() *snapshot.Snapshot { return f.snap }

type fakePrograms struct {
	stats []reading.ProgramStat
	err   error
}

func (f fakePrograms) ProgramStats() ([]reading.ProgramStat, error) { return f.stats, f.err }

// testSnapshot is a two-socket RAPL node with a node-wide psys zone.
// Numbers are chosen so that each series is distinguishable.
func testResources() *reading.Resources {
	return &reading.Resources{CPUUserSeconds: 3, CPUSystemSeconds: 1, MemoryCurrent: 1 << 30, MemoryLimit: 1 << 31,
		MemoryRSS: 1 << 29, MemoryCache: 1 << 28, MemorySwap: 0, MemoryFailCount: 2, MemoryOOMKills: 1,
		IO:    []reading.DeviceIO{{Device: "vda", ReadBytes: 4096, WriteBytes: 8192, ReadOps: 1, WriteOps: 2}},
		PSI:   [reading.NumPSIResources]reading.Pressure{{SomeSeconds: 1.5, FullSeconds: 0.5}, {SomeSeconds: 0.25}, {SomeSeconds: 0.125, FullSeconds: 0.0625}},
		Tasks: 7, Available: ^reading.ResourceField(0)}
}

func testSnapshot() *snapshot.Snapshot {
	return &snapshot.Snapshot{
		Time:      time.Unix(1700000000, 500000000),
		Interval:  5 * time.Second,
		Mode:      "bpf",
		Hierarchy: "v2",
		Intervals: 42,
		Zones: []snapshot.Zone{
			{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: "rapl", EnergyJ: 150, IdleJ: 100, DynamicJ: 50, UnattributedJ: 5, PowerW: 30, IdleClamps: 2},
			{ZoneID: reading.ZoneID{Name: "package", Socket: 1}, Source: "rapl", EnergyJ: 120, IdleJ: 80, DynamicJ: 40, PowerW: 24},
			{ZoneID: reading.ZoneID{Name: "psys", Socket: -1}, Source: "rapl", EnergyJ: 500, IdleJ: 300, DynamicJ: 200, UnattributedJ: 1.5, PowerW: 100, IdleClamps: 1},
		},
		GPUs: []snapshot.GPU{
			{Index: 0, UUID: "GPU-0a1b", Model: "NVIDIA A100-SXM4-40GB", PCIBusID: "0000:3b:00.0", Vendor: "nvidia", Source: "nvml",
				Method: "counter", Basis: "sm_util", EnergyJ: 900, IdleJ: 500, DynamicJ: 400, UnattributedJ: 10, PowerW: 250, Utilization: 0.9,
				Holder:          &snapshot.GPUHolder{Kind: "pod", Namespace: "ml", Pod: "train-0", Container: "trainer", IdleObservable: true},
				InstanceHolders: []snapshot.GPUHolder{{Kind: "slurm", JobID: "77", Instance: "0.1", IdleObservable: true, IdleRatio: 1}},
				Processes:       []snapshot.GPUProcess{{PID: 4242, Comm: "python3", Cgroup: "/kubepods.slice/x", Namespace: "ml", Pod: "train-0", Container: "trainer", DynamicJ: 390, Alive: true}}},
		},
		Cgroups: []*snapshot.Consumer{
			{Cgroup: "/", CgroupID: 1, CPUSeconds: 1.5, ContextSwitches: 10, Alive: true,
				Probes: &reading.ProbeStats{PageCacheAccessed: 10, TCPSentBytes: 1500, BlockWriteBytes: 4096, Counters: [reading.MaxCounters]uint64{7}},
				Perf:   map[string]float64{"instructions": 9e6, "page_faults": 12, "task_clock": 2.5e9, "l1d_read_miss": 4e3},
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 20, IdleJ: 5}}}},
			{Cgroup: "/system.slice/a.service", CgroupID: 77, CPUSeconds: 3, ContextSwitches: 30, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 40, IdleJ: 10}}, {Zone: "psys", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 60}}}},
			// The same path re-created with a new id while the old one is
			// retained: merged into one series.
			{Cgroup: "/system.slice/a.service", CgroupID: 78, CPUSeconds: 1, ContextSwitches: 2, Alive: false,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 5}}}},
		},
		Processes: []*snapshot.Consumer{
			proc(100, "small", 1),
			proc(200, "big", 30),
			proc(300, "mid", 10),
			proc(400, "bad\xffname", 20),
		},
		Probes:   bpfloader.ProbeNames(),
		Counters: []string{"cpu_clock"},
		PerfEvents: []reading.PerfEvent{{Name: "instructions", Kind: reading.PerfKindHardware}, {Name: "page_faults", Kind: reading.PerfKindSoftware},
			{Name: "task_clock", Kind: reading.PerfKindSoftware, Unit: "ns"}, {Name: "l1d_read_miss", Kind: reading.PerfKindCache}},
		Softirqs: []reading.SoftirqVector{{Name: "NET_RX", Count: 12, Ns: 3000}},
		Meters: []reading.SourceHealth{{Source: "redfish", Age: 1500 * time.Millisecond, Up: true, Reads: 10, Errors: 1,
			Rejected: map[string]uint64{"not_finite": 2, "backwards": 1}},
			{Source: "nvml", Reads: 2, Errors: 2, Reason: "nvml_gpu_lost"}},
		MapDrops: []reading.MapDrops{{Map: "exited_procs"}, {Map: "exited_cgroups"}, {Map: "proc_stats", Drops: 3}, {Map: "cgroup_stats"}},
		Workloads: []snapshot.Workload{
			// Every resource field available, as on a hybrid host with PSI.
			{Level: string(ident.KindJob), Manager: "slurm", Labels: []string{"42", "alice", "1000", "n1", ""}, Resources: testResources(), CPUSeconds: 8, ContextSwitches: 4, Alive: true, Cgroups: 2,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 12.5, IdleJ: 1}}}},
			{Level: string(ident.KindJob), Manager: "slurm", Labels: []string{"43", "bob", "1001", "n1", "sEKNKTV3WPV500"}, Resources: testResources(), CPUSeconds: 2, Alive: false,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 3}}}},
			{Level: string(ident.KindVM), Manager: "libvirt", Labels: []string{"c7a5fdbd-cdaf-9455-926a-d65c16db1809", "web1", ""}, Resources: testResources(), CPUSeconds: 5, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 2}}}},
			{Level: string(ident.KindContainer), Manager: "containerd", Labels: []string{"abc", "app", "web-0", "default", "containerd"}, Resources: testResources(), CPUSeconds: 1, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 2}}}},
			{Level: string(ident.KindPod), Manager: "kubernetes", Labels: []string{"0b4c2c6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e", "web-0", "default", "burstable"}, Resources: testResources(), CPUSeconds: 1, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 2}}}},
			{Level: string(ident.KindSystemdUnit), Manager: "systemd", Labels: []string{"a.service", "systemd"}, Resources: testResources(), CPUSeconds: 4, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 2}}}},
			{Level: string(ident.KindPBSJob), Manager: "pbs", Labels: []string{"12345.pbs01", "carol", "1002"}, Resources: testResources(), CPUSeconds: 3, Alive: true,
				Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 2}}}},
		},
	}
}

func proc(pid uint32, comm string, dynJ float64) *snapshot.Consumer {
	return &snapshot.Consumer{
		Cgroup: "/user.slice", PID: pid, Comm: comm, CPUSeconds: dynJ / 10, ContextSwitches: uint64(pid), Alive: true,
		Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: dynJ, IdleJ: 1}}},
	}
}

func newExporter(t *testing.T, snap *snapshot.Snapshot, o Options) *Exporter {
	t.Helper()
	e, err := New(fixedSource{snap}, o)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// gatherCompare registers c on a pedantic registry, which checks every
// metric against its descriptor, and compares the named families.
func gatherCompare(t *testing.T, c prometheus.Collector, want string, names ...string) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
}

func TestNodeCollector(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameNode)})
	gatherCompare(t, e, `
# HELP wattrace_node_energy_joules_total Energy the node used since the exporter started, split into idle and dynamic (mode). sum without(mode) is the zone's energy. Zones overlap (psys contains package, package contains core), so do not sum across zones.
# TYPE wattrace_node_energy_joules_total counter
wattrace_node_energy_joules_total{method="measured",mode="dynamic",socket="0",source="rapl",zone="package"} 50
wattrace_node_energy_joules_total{method="measured",mode="idle",socket="0",source="rapl",zone="package"} 100
wattrace_node_energy_joules_total{method="measured",mode="dynamic",socket="1",source="rapl",zone="package"} 40
wattrace_node_energy_joules_total{method="measured",mode="idle",socket="1",source="rapl",zone="package"} 80
wattrace_node_energy_joules_total{method="measured",mode="dynamic",socket="node",source="rapl",zone="psys"} 200
wattrace_node_energy_joules_total{method="measured",mode="idle",socket="node",source="rapl",zone="psys"} 300
# HELP wattrace_node_power_watts Mean power of the zone over the last accounting interval.
# TYPE wattrace_node_power_watts gauge
wattrace_node_power_watts{method="measured",socket="0",source="rapl",zone="package"} 30
wattrace_node_power_watts{method="measured",socket="1",source="rapl",zone="package"} 24
wattrace_node_power_watts{method="measured",socket="node",source="rapl",zone="psys"} 100
# HELP wattrace_node_unattributed_joules_total Dynamic energy of intervals in which no workload used the CPU, so it could not be split among workloads.
# TYPE wattrace_node_unattributed_joules_total counter
wattrace_node_unattributed_joules_total{method="measured",socket="0",source="rapl",zone="package"} 5
wattrace_node_unattributed_joules_total{method="measured",socket="1",source="rapl",zone="package"} 0
wattrace_node_unattributed_joules_total{method="measured",socket="node",source="rapl",zone="psys"} 1.5
# HELP wattrace_node_idle_clamps_total Intervals in which the idle model exceeded the measured energy and idle was clamped to it. A rising rate means the idle power is set too high.
# TYPE wattrace_node_idle_clamps_total counter
wattrace_node_idle_clamps_total{socket="0",zone="package"} 2
wattrace_node_idle_clamps_total{socket="1",zone="package"} 0
wattrace_node_idle_clamps_total{socket="node",zone="psys"} 1
`, "wattrace_node_energy_joules_total", "wattrace_node_power_watts", "wattrace_node_unattributed_joules_total", "wattrace_node_idle_clamps_total")
}

// An ended zone exports no node series, while a workload's series of the
// zone keep the zone's labels.
func TestNodeCollectorEndedZone(t *testing.T) {
	snap := &snapshot.Snapshot{Zones: []snapshot.Zone{
		{ZoneID: reading.ZoneID{Name: "package", Socket: -1}, Source: "estimator", Estimated: true, IdleJ: 7, DynamicJ: 3, PowerW: 2},
		{ZoneID: reading.ZoneID{Name: "dram", Socket: -1}, Source: "host:hv1", DynamicJ: 4, PowerW: 1, Ended: true},
	}, Cgroups: []*snapshot.Consumer{
		{Cgroup: "/", Energy: snapshot.Energy{{Zone: "dram", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 4}}}},
	}}
	e := newExporter(t, snap, Options{Enabled: on(NameNode, NameCgroup)})
	gatherCompare(t, e, `
# HELP wattrace_node_power_watts Mean power of the zone over the last accounting interval.
# TYPE wattrace_node_power_watts gauge
wattrace_node_power_watts{method="estimated",socket="node",source="estimator",zone="package"} 2
`+cgroupEnergyHelp+`wattrace_cgroup_energy_joules_total{cgroup="/",method="measured",mode="dynamic",source="host:hv1",zone="dram"} 4
`, "wattrace_node_power_watts", "wattrace_cgroup_energy_joules_total")
}

func TestNodeCollectorEstimated(t *testing.T) {
	snap := &snapshot.Snapshot{Zones: []snapshot.Zone{
		{ZoneID: reading.ZoneID{Name: "package", Socket: -1}, Source: "estimator", Estimated: true, IdleJ: 7, DynamicJ: 3, PowerW: 2},
	}, Cgroups: []*snapshot.Consumer{
		{Cgroup: "/", Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 3}}}},
	}, Estimates: []reading.Estimate{
		{ZoneID: reading.ZoneID{Name: "package", Socket: -1}, Source: "estimator", Watts: 2, LowerW: 1.5, UpperW: 2.75,
			Curve: "vm", Tier: "arch", CPU: "xeon platinum 8259cl", Arch: "Cascade Lake", Coefficients: "Cloud Carbon Footprint per-vCPU Cascade Lake shaped by SPECpower"},
	}}
	e := newExporter(t, snap, Options{Enabled: on(NameNode, NameCgroup)})
	gatherCompare(t, e, `
# HELP wattrace_node_power_watts Mean power of the zone over the last accounting interval.
# TYPE wattrace_node_power_watts gauge
wattrace_node_power_watts{method="estimated",socket="node",source="estimator",zone="package"} 2
# HELP wattrace_cgroup_energy_joules_total Energy attributed to the tasks directly in the cgroup. mode="dynamic" is its share of the energy above idle; mode="idle" its share of idle energy under the idle policy (exported only when the policy is not none).
# TYPE wattrace_cgroup_energy_joules_total counter
wattrace_cgroup_energy_joules_total{cgroup="/",method="estimated",mode="dynamic",source="estimator",zone="package"} 3
# HELP wattrace_node_estimated_power_watts The model's power estimate for the zone at the last interval's utilization (method is always estimated).
# TYPE wattrace_node_estimated_power_watts gauge
wattrace_node_estimated_power_watts{method="estimated",socket="node",source="estimator",zone="package"} 2
# HELP wattrace_node_estimated_power_lower_watts Lower bound of the estimate's band: the fit's 5% residual quantile on results it was not fitted on (docs/meters.md).
# TYPE wattrace_node_estimated_power_lower_watts gauge
wattrace_node_estimated_power_lower_watts{method="estimated",socket="node",source="estimator",zone="package"} 1.5
# HELP wattrace_node_estimated_power_upper_watts Upper bound of the estimate's band: the fit's 95% residual quantile on results it was not fitted on (docs/meters.md).
# TYPE wattrace_node_estimated_power_upper_watts gauge
wattrace_node_estimated_power_upper_watts{method="estimated",socket="node",source="estimator",zone="package"} 2.75
# HELP wattrace_node_estimator_info What the zone's estimate is built from: curve (server, package, vm), tier (cpu, arch, generic, configuration: how much of the CPU the model knew), the normalised CPU model, its microarchitecture and the coefficients' source. Always 1.
# TYPE wattrace_node_estimator_info gauge
wattrace_node_estimator_info{arch="Cascade Lake",coefficients="Cloud Carbon Footprint per-vCPU Cascade Lake shaped by SPECpower",cpu="xeon platinum 8259cl",curve="vm",socket="node",source="estimator",tier="arch",zone="package"} 1
`, "wattrace_node_power_watts", "wattrace_cgroup_energy_joules_total", "wattrace_node_estimated_power_watts",
		"wattrace_node_estimated_power_lower_watts", "wattrace_node_estimated_power_upper_watts", "wattrace_node_estimator_info")
}

const cgroupEnergyHelp = `# HELP wattrace_cgroup_energy_joules_total Energy attributed to the tasks directly in the cgroup. mode="dynamic" is its share of the energy above idle; mode="idle" its share of idle energy under the idle policy (exported only when the policy is not none).
# TYPE wattrace_cgroup_energy_joules_total counter
`

func TestCgroupCollector(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameCgroup), IdleAttributed: true})
	gatherCompare(t, e, cgroupEnergyHelp+`
wattrace_cgroup_energy_joules_total{cgroup="/",method="measured",mode="dynamic",source="rapl",zone="package"} 20
wattrace_cgroup_energy_joules_total{cgroup="/",method="measured",mode="idle",source="rapl",zone="package"} 5
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="dynamic",source="rapl",zone="package"} 45
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="idle",source="rapl",zone="package"} 10
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="dynamic",source="rapl",zone="psys"} 60
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="idle",source="rapl",zone="psys"} 0
# HELP wattrace_cgroup_cpu_seconds_total CPU time used by the tasks directly in the cgroup, exited tasks included.
# TYPE wattrace_cgroup_cpu_seconds_total counter
wattrace_cgroup_cpu_seconds_total{cgroup="/"} 1.5
wattrace_cgroup_cpu_seconds_total{cgroup="/system.slice/a.service"} 4
# HELP wattrace_cgroup_context_switches_total Voluntary and involuntary context switches of the tasks directly in the cgroup.
# TYPE wattrace_cgroup_context_switches_total counter
wattrace_cgroup_context_switches_total{cgroup="/"} 10
wattrace_cgroup_context_switches_total{cgroup="/system.slice/a.service"} 32
`, "wattrace_cgroup_energy_joules_total", "wattrace_cgroup_cpu_seconds_total", "wattrace_cgroup_context_switches_total")
}

// Under idle policy "none" workloads get no idle energy, so no all-zero
// mode="idle" series are exported.
func TestCgroupCollectorNoIdlePolicy(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameCgroup)})
	gatherCompare(t, e, cgroupEnergyHelp+`
wattrace_cgroup_energy_joules_total{cgroup="/",method="measured",mode="dynamic",source="rapl",zone="package"} 20
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="dynamic",source="rapl",zone="package"} 45
wattrace_cgroup_energy_joules_total{cgroup="/system.slice/a.service",method="measured",mode="dynamic",source="rapl",zone="psys"} 60
`, "wattrace_cgroup_energy_joules_total")
}

func TestProcessCollectorTopN(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameProcess), Settings: Settings{NameProcess: &ProcessSettings{Top: 2}}, IdleAttributed: true})
	gatherCompare(t, e, `
# HELP wattrace_process_energy_joules_total Energy attributed to the process (all its threads, exited ones included); mode as for wattrace_cgroup_energy_joules_total. Only the top N processes by energy are exported.
# TYPE wattrace_process_energy_joules_total counter
wattrace_process_energy_joules_total{cgroup="/user.slice",comm="big",method="measured",mode="dynamic",pid="200",source="rapl",zone="package"} 30
wattrace_process_energy_joules_total{cgroup="/user.slice",comm="big",method="measured",mode="idle",pid="200",source="rapl",zone="package"} 1
wattrace_process_energy_joules_total{cgroup="/user.slice",comm="bad`+"\uFFFD"+`name",method="measured",mode="dynamic",pid="400",source="rapl",zone="package"} 20
wattrace_process_energy_joules_total{cgroup="/user.slice",comm="bad`+"\uFFFD"+`name",method="measured",mode="idle",pid="400",source="rapl",zone="package"} 1
# HELP wattrace_process_cpu_seconds_total CPU time used by the process, all threads included.
# TYPE wattrace_process_cpu_seconds_total counter
wattrace_process_cpu_seconds_total{cgroup="/user.slice",comm="big",pid="200"} 3
wattrace_process_cpu_seconds_total{cgroup="/user.slice",comm="bad`+"\uFFFD"+`name",pid="400"} 2
# HELP wattrace_process_context_switches_total Voluntary and involuntary context switches of the process's threads.
# TYPE wattrace_process_context_switches_total counter
wattrace_process_context_switches_total{cgroup="/user.slice",comm="big",pid="200"} 200
wattrace_process_context_switches_total{cgroup="/user.slice",comm="bad`+"\uFFFD"+`name",pid="400"} 400
`, "wattrace_process_energy_joules_total", "wattrace_process_cpu_seconds_total", "wattrace_process_context_switches_total")
}

func TestProcessCollectorAll(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameProcess), Settings: Settings{NameProcess: &ProcessSettings{Top: 0}}})
	if n := testutil.CollectAndCount(e, "wattrace_process_cpu_seconds_total"); n != 4 {
		t.Errorf("top 0 exported %d processes, want all 4", n)
	}
}

func agg(pid uint32, total float64) *seriesAgg {
	return &seriesAgg{key: seriesKey{pid: pid}, total: total}
}

func pids(ws []*seriesAgg) []uint32 {
	out := make([]uint32, len(ws))
	for i, w := range ws {
		out[i] = w.key.pid
	}
	return out
}

func TestTopN(t *testing.T) {
	in := func() []*seriesAgg {
		return []*seriesAgg{agg(1, 5), agg(2, 50), agg(3, 0), agg(4, 50), agg(5, 7), agg(6, 100), agg(7, 7)}
	}
	tests := []struct {
		n    int
		want []uint32
	}{
		{1, []uint32{6}},
		{2, []uint32{6, 2}},          // tie on 50: lower PID first
		{3, []uint32{6, 2, 4}},       // both tied entries
		{5, []uint32{6, 2, 4, 5, 7}}, // tie on 7
		{6, []uint32{6, 2, 4, 5, 7, 1}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			if got := pids(topN(in(), tt.n)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("topN(%d) = %v, want %v", tt.n, got, tt.want)
			}
		})
	}
	if got := topN(in(), 7); len(got) != 7 {
		t.Errorf("n == len: got %d, want all 7", len(got))
	}
	if got := topN(in(), 0); len(got) != 7 {
		t.Errorf("n == 0: got %d, want all 7", len(got))
	}
	if got := topN(nil, 3); len(got) != 0 {
		t.Errorf("empty input: got %d", len(got))
	}
}

func TestSelfCollector(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{})
	gatherCompare(t, e, fmt.Sprintf(`
# HELP wattrace_build_info Always 1; the labels identify the wattrace build.
# TYPE wattrace_build_info gauge
wattrace_build_info{goversion=%q,revision=%q,version=%q} 1
# HELP wattrace_accounting_mode 1 for the active per-task CPU accounting mode (bpf or procfs), 0 for the others. Exported once the first interval has completed.
# TYPE wattrace_accounting_mode gauge
wattrace_accounting_mode{mode="bpf"} 1
wattrace_accounting_mode{mode="procfs"} 0
# HELP wattrace_cgroup_hierarchy_info Always 1; hierarchy names the cgroup hierarchy that keys workloads (v2, cpuacct or cpu). Exported once the first interval has completed.
# TYPE wattrace_cgroup_hierarchy_info gauge
wattrace_cgroup_hierarchy_info{hierarchy="v2"} 1
# HELP wattrace_stats_last_update_timestamp_seconds Unix time at which the latest accounting interval ended. Exported once the first interval has completed.
# TYPE wattrace_stats_last_update_timestamp_seconds gauge
wattrace_stats_last_update_timestamp_seconds 1.7000000005e+09
# HELP wattrace_stats_intervals_total Accounting intervals completed since the exporter started.
# TYPE wattrace_stats_intervals_total counter
wattrace_stats_intervals_total 42
`, runtime.Version(), version.Revision, version.Version),
		"wattrace_build_info", "wattrace_accounting_mode", "wattrace_cgroup_hierarchy_info",
		"wattrace_stats_last_update_timestamp_seconds", "wattrace_stats_intervals_total")
}

// Before the first interval the exporter still answers: build info, zero
// intervals, and success 0 for the collectors that need a snapshot.
func TestNoSnapshotYet(t *testing.T) {
	e := newExporter(t, nil, Options{Enabled: on(NameNode, NameCgroup, NameProcess, NameBPFStats), Settings: Settings{NameProcess: &ProcessSettings{Top: 20}}, Programs: []ProgramStatsSource{fakePrograms{stats: []reading.ProgramStat{{Name: "sched_switch", RunTime: time.Second, RunCount: 10}}}}})
	gatherCompare(t, e, `
# HELP wattrace_scrape_collector_success Whether a collector succeeded (1) or failed or had no data yet (0) in this scrape.
# TYPE wattrace_scrape_collector_success gauge
wattrace_scrape_collector_success{collector="bpf-stats"} 1
wattrace_scrape_collector_success{collector="cgroup"} 0
wattrace_scrape_collector_success{collector="node"} 0
wattrace_scrape_collector_success{collector="process"} 0
# HELP wattrace_stats_intervals_total Accounting intervals completed since the exporter started.
# TYPE wattrace_stats_intervals_total counter
wattrace_stats_intervals_total 0
`, "wattrace_scrape_collector_success", "wattrace_stats_intervals_total", "wattrace_node_energy_joules_total", "wattrace_accounting_mode")
	if n := testutil.CollectAndCount(e, "wattrace_build_info"); n != 1 {
		t.Errorf("build_info: %d series, want 1", n)
	}
}

func TestBPFStatsCollector(t *testing.T) {
	progs := fakePrograms{stats: []reading.ProgramStat{
		{Name: "handle_switch", RunTime: 1500 * time.Millisecond, RunCount: 1000},
		{Name: "handle_exit", RunTime: 250 * time.Millisecond, RunCount: 40},
		// Kernel names are truncated, so two programs can share one.
		{Name: "handle_exit", RunTime: 250 * time.Millisecond, RunCount: 2},
	}}
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameBPFStats), Programs: []ProgramStatsSource{progs}})
	gatherCompare(t, e, `
# HELP wattrace_bpf_program_run_seconds_total Time the kernel spent running the BPF program while statistics were enabled.
# TYPE wattrace_bpf_program_run_seconds_total counter
wattrace_bpf_program_run_seconds_total{program="handle_exit"} 0.5
wattrace_bpf_program_run_seconds_total{program="handle_switch"} 1.5
# HELP wattrace_bpf_program_runs_total Times the kernel ran the BPF program while statistics were enabled.
# TYPE wattrace_bpf_program_runs_total counter
wattrace_bpf_program_runs_total{program="handle_exit"} 42
wattrace_bpf_program_runs_total{program="handle_switch"} 1000
# HELP wattrace_scrape_collector_success Whether a collector succeeded (1) or failed or had no data yet (0) in this scrape.
# TYPE wattrace_scrape_collector_success gauge
wattrace_scrape_collector_success{collector="bpf-stats"} 1
`, "wattrace_bpf_program_run_seconds_total", "wattrace_bpf_program_runs_total", "wattrace_scrape_collector_success")

	failing := newExporter(t, testSnapshot(), Options{Enabled: on(NameNode, NameBPFStats), Programs: []ProgramStatsSource{fakePrograms{err: errors.New("EPERM")}}})
	gatherCompare(t, failing, `
# HELP wattrace_scrape_collector_success Whether a collector succeeded (1) or failed or had no data yet (0) in this scrape.
# TYPE wattrace_scrape_collector_success gauge
wattrace_scrape_collector_success{collector="bpf-stats"} 0
wattrace_scrape_collector_success{collector="node"} 1
`, "wattrace_scrape_collector_success", "wattrace_bpf_program_runs_total")
}

func TestScrapeDurationPerCollector(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NameNode, NameCgroup)})
	if n := testutil.CollectAndCount(e, "wattrace_scrape_collector_duration_seconds"); n != 2 {
		t.Errorf("got %d duration series, want one per enabled collector (2)", n)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("nil source accepted")
	}
	if _, err := New(fixedSource{}, Options{Enabled: on(NameBPFStats)}); err == nil {
		t.Error("bpf-stats without a program source accepted")
	}
	if _, err := New(fixedSource{}, Options{Settings: Settings{NameProcess: &ProcessSettings{Top: -1}}}); err == nil {
		t.Error("negative top accepted")
	}
}

func BenchmarkProcessCollector(b *testing.B) {
	snap := testSnapshot()
	snap.Processes = nil
	for i := 0; i < 10000; i++ {
		snap.Processes = append(snap.Processes, proc(uint32(i+1), fmt.Sprintf("p%d", i%97), float64(i%1013)))
	}
	e, err := New(fixedSource{snap}, Options{Enabled: on(NameProcess), Settings: Settings{NameProcess: &ProcessSettings{Top: 20}}})
	if err != nil {
		b.Fatal(err)
	}
	ch := make(chan prometheus.Metric, 1024)
	done := make(chan struct{})
	go func() {
		for range ch {
		}
		close(done)
	}()
	b.ReportAllocs()
	for b.Loop() {
		e.Collect(ch)
	}
	close(ch)
	<-done
}

func TestJobSeries(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Levels: []ident.Kind{ident.KindJob}, IdleAttributed: true})
	want := `# HELP wattrace_job_cpu_seconds_total CPU time of the job's tasks, exited ones included.
# TYPE wattrace_job_cpu_seconds_total counter
wattrace_job_cpu_seconds_total{job_id="42",sluid="",slurm_node="n1",uid="1000",user="alice"} 8
wattrace_job_cpu_seconds_total{job_id="43",sluid="sEKNKTV3WPV500",slurm_node="n1",uid="1001",user="bob"} 2
# HELP wattrace_job_energy_joules_total Energy attributed to the job, summed over its cgroups; mode as for wattrace_cgroup_energy_joules_total.
# TYPE wattrace_job_energy_joules_total counter
wattrace_job_energy_joules_total{job_id="42",method="measured",mode="dynamic",sluid="",slurm_node="n1",source="rapl",uid="1000",user="alice",zone="package"} 12.5
wattrace_job_energy_joules_total{job_id="42",method="measured",mode="idle",sluid="",slurm_node="n1",source="rapl",uid="1000",user="alice",zone="package"} 1
wattrace_job_energy_joules_total{job_id="43",method="measured",mode="dynamic",sluid="sEKNKTV3WPV500",slurm_node="n1",source="rapl",uid="1001",user="bob",zone="package"} 3
wattrace_job_energy_joules_total{job_id="43",method="measured",mode="idle",sluid="sEKNKTV3WPV500",slurm_node="n1",source="rapl",uid="1001",user="bob",zone="package"} 0
# HELP wattrace_units_running Workloads at each level with at least one live cgroup, per manager.
# TYPE wattrace_units_running gauge
wattrace_units_running{level="job",manager="slurm"} 1
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want),
		"wattrace_job_cpu_seconds_total", "wattrace_job_energy_joules_total", "wattrace_units_running"); err != nil {
		t.Error(err)
	}
}

func TestJobResourceSeries(t *testing.T) {
	snap := testSnapshot()
	snap.Workloads[1].Resources = nil // job 43: nothing read, so nothing exported
	e := newExporter(t, snap, Options{Levels: []ident.Kind{ident.KindJob}})
	want := `# HELP wattrace_job_memory_limit_bytes Memory limit of the job's cgroup; absent when unlimited.
# TYPE wattrace_job_memory_limit_bytes gauge
wattrace_job_memory_limit_bytes{job_id="42",sluid="",slurm_node="n1",uid="1000",user="alice"} 2.147483648e+09
# HELP wattrace_job_io_bytes_total Block IO bytes of the job's cgroup per device and operation.
# TYPE wattrace_job_io_bytes_total counter
wattrace_job_io_bytes_total{device="vda",job_id="42",op="read",sluid="",slurm_node="n1",uid="1000",user="alice"} 4096
wattrace_job_io_bytes_total{device="vda",job_id="42",op="write",sluid="",slurm_node="n1",uid="1000",user="alice"} 8192
# HELP wattrace_job_pressure_seconds_total Pressure stall time (PSI) of the job's cgroup: some = some task stalled, full = all stalled.
# TYPE wattrace_job_pressure_seconds_total counter
wattrace_job_pressure_seconds_total{job_id="42",kind="full",resource="cpu",sluid="",slurm_node="n1",uid="1000",user="alice"} 0.5
wattrace_job_pressure_seconds_total{job_id="42",kind="full",resource="io",sluid="",slurm_node="n1",uid="1000",user="alice"} 0.0625
wattrace_job_pressure_seconds_total{job_id="42",kind="some",resource="cpu",sluid="",slurm_node="n1",uid="1000",user="alice"} 1.5
wattrace_job_pressure_seconds_total{job_id="42",kind="some",resource="io",sluid="",slurm_node="n1",uid="1000",user="alice"} 0.125
wattrace_job_pressure_seconds_total{job_id="42",kind="some",resource="memory",sluid="",slurm_node="n1",uid="1000",user="alice"} 0.25
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want),
		"wattrace_job_memory_limit_bytes", "wattrace_job_io_bytes_total", "wattrace_job_pressure_seconds_total"); err != nil {
		t.Error(err)
	}
}

// By default the probe families are exported per node (the cgroups' sum)
// and per workload, not per cgroup; a family whose series are all zero
// (network calls, page cache adds here) is left out, and so is a family
// all zero for one workload (job 43's page cache reads) though another
// workload of the level counted in it.
func TestProbeSeries(t *testing.T) {
	snap := testSnapshot()
	snap.Cgroups[1].Probes = &reading.ProbeStats{BlockWriteBytes: 1024, BlockReadBytes: 512}
	snap.Workloads[0].Probes = &reading.ProbeStats{PageCacheAccessed: 3}
	snap.Workloads[1].Probes = &reading.ProbeStats{}
	snap.Workloads[5].Probes = &reading.ProbeStats{BlockWriteBytes: 1024, BlockReadBytes: 512}
	e := newExporter(t, snap, Options{Enabled: on(NameProbes), Levels: ident.Levels()})
	want := `# HELP wattrace_cgroup_perf_events_total Perf counter events credited to the cgroup's tasks at context switches, scaled for multiplexing.
# TYPE wattrace_cgroup_perf_events_total counter
wattrace_cgroup_perf_events_total{cgroup="/",counter="cpu_clock"} 7
wattrace_cgroup_perf_events_total{cgroup="/system.slice/a.service",counter="cpu_clock"} 0
# HELP wattrace_node_block_io_bytes_total Block IO bytes submitted by the node's tasks (bios before merging; writeback of buffered writes is submitted by kernel flushers and not counted here).
# TYPE wattrace_node_block_io_bytes_total counter
wattrace_node_block_io_bytes_total{op="read"} 512
wattrace_node_block_io_bytes_total{op="write"} 5120
# HELP wattrace_job_page_cache_read_pages_total Pages read through the page cache by the job's tasks (read, splice, sendfile; not mmap).
# TYPE wattrace_job_page_cache_read_pages_total counter
wattrace_job_page_cache_read_pages_total{job_id="42",sluid="",slurm_node="n1",uid="1000",user="alice"} 3
# HELP wattrace_unit_block_io_bytes_total Block IO bytes submitted by the unit's tasks (bios before merging; writeback of buffered writes is submitted by kernel flushers and not counted here).
# TYPE wattrace_unit_block_io_bytes_total counter
wattrace_unit_block_io_bytes_total{manager="systemd",op="read",unit="a.service"} 512
wattrace_unit_block_io_bytes_total{manager="systemd",op="write",unit="a.service"} 1024
# HELP wattrace_node_softirq_seconds_total Time spent in softirqs on the node by vector.
# TYPE wattrace_node_softirq_seconds_total counter
wattrace_node_softirq_seconds_total{vector="NET_RX"} 3e-06
`
	names := []string{"wattrace_cgroup_perf_events_total", "wattrace_node_block_io_bytes_total", "wattrace_node_softirq_seconds_total",
		"wattrace_job_page_cache_read_pages_total", "wattrace_unit_block_io_bytes_total",
		// Absent: per cgroup without the option; all zero.
		"wattrace_cgroup_block_io_bytes_total", "wattrace_node_network_calls_total", "wattrace_node_page_cache_added_pages_total",
		"wattrace_job_block_io_bytes_total", "wattrace_unit_page_cache_read_pages_total"}
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// With collector.probes.per-cgroup, the cgroups' series as well.
	e = newExporter(t, snap, Options{Enabled: on(NameProbes), Settings: Settings{NameProbes: &probesSettings{PerCgroup: true}}})
	want = `# HELP wattrace_cgroup_block_io_bytes_total Block IO bytes submitted by the cgroup's tasks (bios before merging; writeback of buffered writes is submitted by kernel flushers and not counted here).
# TYPE wattrace_cgroup_block_io_bytes_total counter
wattrace_cgroup_block_io_bytes_total{cgroup="/",op="read"} 0
wattrace_cgroup_block_io_bytes_total{cgroup="/",op="write"} 4096
wattrace_cgroup_block_io_bytes_total{cgroup="/system.slice/a.service",op="read"} 512
wattrace_cgroup_block_io_bytes_total{cgroup="/system.slice/a.service",op="write"} 1024
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "wattrace_cgroup_block_io_bytes_total", "wattrace_cgroup_network_calls_total"); err != nil {
		t.Error(err)
	}
}

func TestPerfSeries(t *testing.T) {
	e := newExporter(t, testSnapshot(), Options{Enabled: on(NamePerf)})
	want := `# HELP wattrace_cgroup_perf_clock_seconds_total cpu_clock and task_clock of the cgroup's opted-in processes.
# TYPE wattrace_cgroup_perf_clock_seconds_total counter
wattrace_cgroup_perf_clock_seconds_total{cgroup="/",clock="task_clock"} 2.5
# HELP wattrace_cgroup_perf_hardware_events_total Hardware perf events of the cgroup's opted-in processes, scaled for multiplexing.
# TYPE wattrace_cgroup_perf_hardware_events_total counter
wattrace_cgroup_perf_hardware_events_total{cgroup="/",event="instructions"} 9e+06
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want),
		"wattrace_cgroup_perf_clock_seconds_total", "wattrace_cgroup_perf_hardware_events_total"); err != nil {
		t.Error(err)
	}
}

// on enables collectors by name.
func on(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// A resource family whose series are all zero at a level (no swap used by
// any job) is left out; the others stay, zeros of single workloads
// included.
func TestResourceFamilyAllZeroLeftOut(t *testing.T) {
	snap := testSnapshot()
	snap.Workloads[1].Resources = &reading.Resources{MemoryCurrent: 0, MemoryOOMKills: 0, Available: reading.FieldMemoryCurrent | reading.FieldMemoryOOMKills}
	e := newExporter(t, snap, Options{Levels: []ident.Kind{ident.KindJob}})
	for name, want := range map[string]int{"wattrace_job_memory_swap_bytes": 0, "wattrace_job_memory_usage_bytes": 2, "wattrace_job_memory_oom_kills_total": 2} {
		if n := testutil.CollectAndCount(e, name); n != want {
			t.Errorf("%s: %d series, want %d", name, n, want)
		}
	}
}

// A cgroup that belongs to an exported workload is exported at the
// workload's level only (its energy, CPU, switches and grams would repeat
// the workload's); collector.cgroup.workloads brings its cgroup series back.
func TestCgroupInWorkloadExportedOnce(t *testing.T) {
	snap := testSnapshot()
	grams := snapshot.Emissions{{Provider: "p", Zone: "package", DynamicG: 2}}
	snap.Cgroups = append(snap.Cgroups, &snapshot.Consumer{Cgroup: "/slurm/uid_1000/job_42/step_batch", CgroupID: 90, CPUSeconds: 8,
		ContextSwitches: 4, Alive: true, InWorkload: true, Grams: grams,
		Energy: snapshot.Energy{{Zone: "package", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 12.5}}}})
	snap.Cgroups[0].Grams = grams
	count := func(o Options) map[string]int {
		t.Helper()
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(newExporter(t, snap, o))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "cgroup" && l.GetValue() == "/slurm/uid_1000/job_42/step_batch" {
						out[mf.GetName()]++
					}
				}
			}
			if mf.GetName() == "wattrace_cgroup_cpu_seconds_total" {
				out["cgroups"] = len(mf.GetMetric())
			}
		}
		return out
	}
	o := Options{Enabled: on(NameCgroup), Emissions: true, Levels: []ident.Kind{ident.KindJob}}
	if got := count(o); len(got) != 1 || got["cgroups"] != 2 {
		t.Errorf("by default: %v, want no series of the job's cgroup and the 2 other cgroups", got)
	}
	o.Settings = Settings{NameCgroup: &cgroupSettings{Workloads: true}}
	got := count(o)
	for _, f := range []string{"wattrace_cgroup_cpu_seconds_total", "wattrace_cgroup_context_switches_total", "wattrace_cgroup_energy_joules_total", "wattrace_cgroup_emissions_grams_total"} {
		if got[f] != 1 {
			t.Errorf("with collector.cgroup.workloads: %s has %d series of the job's cgroup, want 1", f, got[f])
		}
	}
}

// A workload without a memory limit has no limit series (it used to be
// +Inf, a series per job or pod that told nothing).
func TestUnlimitedMemoryLimitLeftOut(t *testing.T) {
	snap := testSnapshot()
	for i := range snap.Workloads {
		snap.Workloads[i].Resources.MemoryLimit = reading.Unlimited
	}
	snap.Workloads[1].Resources.MemoryLimit = 1 << 20 // job 43 has one
	e := newExporter(t, snap, Options{Levels: []ident.Kind{ident.KindJob}})
	want := `# HELP wattrace_job_memory_limit_bytes Memory limit of the job's cgroup; absent when unlimited.
# TYPE wattrace_job_memory_limit_bytes gauge
wattrace_job_memory_limit_bytes{job_id="43",sluid="sEKNKTV3WPV500",slurm_node="n1",uid="1001",user="bob"} 1.048576e+06
`
	if err := testutil.CollectAndCompare(e, strings.NewReader(want), "wattrace_job_memory_limit_bytes"); err != nil {
		t.Error(err)
	}
}

// Softirqs are counted against whichever task they interrupted: per node
// always, per workload only with collector.probes.softirq-per-workload.
func TestSoftirqPerWorkloadOnRequest(t *testing.T) {
	snap := testSnapshot()
	snap.Workloads[0].Probes = &reading.ProbeStats{SoftirqCount: 5, SoftirqNs: 1e6, PageCacheAccessed: 3}
	snap.Cgroups[0].Probes = &reading.ProbeStats{SoftirqCount: 5, SoftirqNs: 1e6}
	count := func(o Options) (node, job int) {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(newExporter(t, snap, o))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			switch mf.GetName() {
			case "wattrace_node_softirq_interrupted_total":
				node = len(mf.GetMetric())
			case "wattrace_job_softirq_interrupted_total":
				job = len(mf.GetMetric())
			}
		}
		return
	}
	o := Options{Enabled: on(NameProbes), Levels: []ident.Kind{ident.KindJob}}
	if node, job := count(o); node != 1 || job != 0 {
		t.Errorf("by default: node %d, job %d series, want 1 and 0", node, job)
	}
	o.Settings = Settings{NameProbes: &probesSettings{SoftirqWorkloads: true}}
	if node, job := count(o); node != 1 || job != 1 {
		t.Errorf("on request: node %d, job %d series, want 1 and 1", node, job)
	}
}
