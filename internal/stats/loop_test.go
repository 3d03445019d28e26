package stats

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fakeSource replays readings; CPU counters are cumulative.
type fakeSource struct {
	r   reading.Usage
	err error
}

func (f *fakeSource) Read() (reading.Usage, error) {
	if f.err != nil {
		return reading.Usage{}, f.err
	}
	r := reading.Usage{
		Processes: append([]reading.ProcessUsage(nil), f.r.Processes...),
		Cgroups:   append([]reading.CgroupUsage(nil), f.r.Cgroups...),
	}
	return r, nil
}
func (f *fakeSource) Mode() string { return "bpf" }
func (f *fakeSource) Close() error { return nil }

func (f *fakeSource) add(cg uint64, pid uint32, cpu int, ns uint64) {
	found := false
	for i := range f.r.Cgroups {
		if f.r.Cgroups[i].ID == cg {
			f.r.Cgroups[i].CPUNs += ns
			found = true
		}
	}
	if !found {
		f.r.Cgroups = append(f.r.Cgroups, reading.CgroupUsage{ID: cg, CPUNs: ns})
	}
	for i := range f.r.Processes {
		if f.r.Processes[i].Key.PID == pid {
			f.r.Processes[i].CPUNs += ns
			f.r.Processes[i].CPU = cpu
			return
		}
	}
	f.r.Processes = append(f.r.Processes, reading.ProcessUsage{Key: reading.ProcKey{PID: pid}, Cgroup: cg, CPUNs: ns, CPU: cpu, Alive: true})
}

// fakeMeter serves cumulative zone energies set by the test.
type fakeMeter struct {
	samples []reading.ZoneSample
	err     error
}

func (m *fakeMeter) Name() string    { return "rapl" }
func (m *fakeMeter) Estimated() bool { return false }
func (m *fakeMeter) Read(_ context.Context) ([]reading.ZoneSample, error) {
	if m.err != nil {
		return nil, m.err
	}
	return append([]reading.ZoneSample(nil), m.samples...), nil
}

type names map[uint64]string

// anyName resolves every id.
type anyName struct{}

func (anyName) Path(id uint64) (string, bool) { return "/x", true }

func (n names) Path(id uint64) (string, bool) { p, ok := n[id]; return p, ok }

func mustLoop(t *testing.T, cfg Config, src *fakeSource, m Meter, res CgroupPaths) *Loop {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.IdlePolicy == "" {
		cfg.IdlePolicy = "none"
	}
	l, err := New(cfg, src, m, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func cgroupByPath(s *snapshot.Snapshot, path string) *snapshot.Consumer {
	for _, w := range s.Cgroups {
		if w.Cgroup == path {
			return w
		}
	}
	return &snapshot.Consumer{}
}

// Two workloads in a 2:1 CPU ratio with 10 W of configured idle: idle is
// exactly 10 W × Δt, and the rest goes 2:1.
func TestSplitByCPU(t *testing.T) {
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	src.add(2, 200, 0, 0)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 10}, CPUs: 2}, src, m, names{1: "/a", 2: "/b"})
	t0 := time.Unix(1000, 0)
	l.Step(t0)
	src.add(1, 100, 0, 2e9)
	src.add(2, 200, 0, 1e9)
	m.samples[0].Joules = 50 // 50 J in 2 s: 20 J idle, 30 J dynamic
	l.Step(t0.Add(2 * time.Second))
	s := l.Snapshot()
	z := s.Zones[0]
	if z.IdleJ != 20 || z.DynamicJ != 30 || z.EnergyJ != 50 || z.PowerW != 25 {
		t.Fatalf("zone: %+v", z)
	}
	a, b := cgroupByPath(s, "/a"), cgroupByPath(s, "/b")
	if a.Energy.Get("package").DynamicJ != 20 || b.Energy.Get("package").DynamicJ != 10 {
		t.Errorf("dynamic: a %v b %v, want 20 and 10", a.Energy.Get("package"), b.Energy.Get("package"))
	}
	if a.CPUSeconds != 2 || b.CPUSeconds != 1 {
		t.Errorf("cpu seconds: a %v b %v", a.CPUSeconds, b.CPUSeconds)
	}
	var pSum float64
	for _, p := range s.Processes {
		pSum += p.Energy.Get("package").DynamicJ
	}
	if pSum != 30 {
		t.Errorf("processes got %v J of 30 J dynamic", pSum)
	}
}

// 100 intervals of random-ish load, with the RAPL-like counter passing
// through wraparound in the meter (already corrected to cumulative):
// Σ workload dynamic + unattributed + idle = node energy to 1e-9.
func TestConservationOver100Intervals(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "dram", Socket: 0}}}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 7.5, "dram": 40}, IdlePolicy: "cpu", CPUs: 2}, src, m, anyName{})
	t0 := time.Unix(0, 0)
	l.Step(t0)
	seed := uint64(42)
	rnd := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	for i := 1; i <= 100; i++ {
		for w := uint64(0); w < 50; w++ {
			if rnd()%3 != 0 {
				src.add(w, uint32(w+1000), 0, rnd()%1e9)
			}
		}
		m.samples[0].Joules += float64(rnd()%10000) / 7
		m.samples[1].Joules += float64(rnd()%1000) / 3
		l.Step(t0.Add(time.Duration(i) * time.Second))
	}
	s := l.Snapshot()
	for _, z := range s.Zones {
		var cg, pr float64
		for _, w := range s.Cgroups {
			cg += w.Energy.Get(z.Name).DynamicJ + w.Energy.Get(z.Name).IdleJ
		}
		for _, w := range s.Processes {
			pr += w.Energy.Get(z.Name).DynamicJ + w.Energy.Get(z.Name).IdleJ
		}
		node := z.EnergyJ
		if math.Abs(z.IdleJ+z.DynamicJ-node) > 1e-9*node {
			t.Errorf("%s: idle %v + dynamic %v != %v", z.Name, z.IdleJ, z.DynamicJ, node)
		}
		// Under the cpu policy workloads carry idle too: all of the node.
		if math.Abs(cg+z.UnattributedJ-node) > 1e-9*node {
			t.Errorf("%s: cgroups %v + unattributed %v != node %v", z.Name, cg, z.UnattributedJ, node)
		}
		if math.Abs(pr+z.UnattributedJ-node) > 1e-9*node {
			t.Errorf("%s: processes %v + unattributed %v != node %v", z.Name, pr, z.UnattributedJ, node)
		}
		if z.Name == "dram" && z.IdleClamps == 0 {
			t.Errorf("dram idle (40 W) exceeds its energy yet no clamp was counted")
		}
	}
}

// Two sockets: work that ran only on socket 1's CPUs gets only socket 1's
// energy.
func TestTwoSockets(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "package", Socket: 1}}}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 0}, Sockets: map[int]int{0: 0, 1: 0, 2: 1, 3: 1}, CPUs: 4},
		src, m, names{1: "/s0", 2: "/s1"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	src.add(2, 2, 3, 0)
	l.Step(t0)
	src.add(1, 1, 1, 1e9)
	src.add(2, 2, 3, 3e9)
	m.samples[0].Joules, m.samples[1].Joules = 100, 40
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	if got := cgroupByPath(s, "/s0").Energy.Get("package").DynamicJ; got != 100 {
		t.Errorf("socket-0 work got %v J, want all 100 J of socket 0", got)
	}
	if got := cgroupByPath(s, "/s1").Energy.Get("package").DynamicJ; got != 40 {
		t.Errorf("socket-1 work got %v J, want all 40 J of socket 1", got)
	}
}

// A failing source or meter is logged; counters never go backwards and
// the next good read catches up.
func TestFailuresLoseNothing(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 0}}, src, m, names{1: "/a"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	l.Step(t0)
	m.err = errors.New("meter down")
	src.add(1, 1, 0, 1e9)
	m.samples[0].Joules = 10
	l.Step(t0.Add(time.Second))
	if got := cgroupByPath(l.Snapshot(), "/a").CPUSeconds; got != 1 {
		t.Errorf("cpu with the meter down: %v, want 1", got)
	}
	m.err = nil
	src.err = errors.New("source down")
	m.samples[0].Joules = 30
	l.Step(t0.Add(2 * time.Second))
	z := l.Snapshot().Zones[0]
	if z.EnergyJ != 30 || z.UnattributedJ != 30 {
		t.Errorf("zone after source failure: %+v, want 30 J, all unattributed", z)
	}
	src.err = nil
	src.add(1, 1, 0, 1e9)
	m.samples[0].Joules = 40
	l.Step(t0.Add(3 * time.Second))
	a := cgroupByPath(l.Snapshot(), "/a")
	if a.CPUSeconds != 2 || a.Energy.Get("package").DynamicJ != 10 {
		t.Errorf("after recovery: cpu %v (want 2), dynamic %v (want 10)", a.CPUSeconds, a.Energy.Get("package").DynamicJ)
	}
}

// Terminated processes stay for the retention, then leave; a cgroup
// removed while its source still reports it leaves after retention and its
// counters never restart.
func TestRetention(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	res := names{1: "/a"}
	l := mustLoop(t, Config{Retention: 10 * time.Second}, src, m, res)
	t0 := time.Unix(0, 0)
	src.add(1, 7, 0, 1e9)
	l.Step(t0)
	src.r.Processes[0].Alive = false
	l.Step(t0.Add(time.Second))
	src.r.Processes = nil
	delete(res, 1)
	l.Step(t0.Add(5 * time.Second))
	s := l.Snapshot()
	if len(s.Processes) != 1 || s.Processes[0].Alive {
		t.Fatalf("within retention: %+v", s.Processes)
	}
	if w := cgroupByPath(s, "/a"); w.Alive || w.CPUSeconds != 1 {
		t.Errorf("removed cgroup within retention: %+v", w)
	}
	l.Step(t0.Add(20 * time.Second))
	s = l.Snapshot()
	if len(s.Processes) != 0 || len(s.Cgroups) != 0 {
		t.Errorf("after retention: %d processes, %d cgroups", len(s.Processes), len(s.Cgroups))
	}
	// The source still reports the cgroup; its state must survive so that
	// a counter can't restart from zero.
	if cs := stageOf[*ledger](l).cgIDs[1]; cs == nil || cs.w.f.CPUSeconds != 1 {
		t.Errorf("cgroup state dropped while its source still reports it: %+v", cs)
	}
}

func TestConfigErrors(t *testing.T) {
	src, m := &fakeSource{}, &fakeMeter{}
	for _, c := range []Config{
		{Interval: 0, IdlePolicy: "none"},
		{Interval: time.Second, IdlePolicy: "most"},
		{Interval: time.Second, IdlePolicy: "none", IdleWatts: map[string]float64{"package": -1}},
	} {
		if _, err := New(c, src, m, nil, nil); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

// With the estimator as meter, idle is the model's own floor (its curve
// at no load) and dynamic energy is exactly what utilization added.
func TestEstimatorIdle(t *testing.T) {
	est, err := power.NewEstimator(power.LinearZone(reading.ZonePackage, 2, 6))
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	l := mustLoop(t, Config{CPUs: 2}, src, est, names{1: "/a"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	l.Step(t0)
	src.add(1, 1, 0, 10e9) // 10 CPU-s in 10 s on 2 CPUs: 50% utilization
	l.Step(t0.Add(10 * time.Second))
	s := l.Snapshot()
	z := s.Zones[0]
	// 2 W idle × 10 s = 20 J; (3−1) W × 2 CPUs × 0.5 × 10 s = 20 J dynamic.
	if z.IdleJ != 20 || z.DynamicJ != 20 || !z.Estimated || z.Source != "estimator" {
		t.Errorf("zone %+v", z)
	}
	if got := cgroupByPath(s, "/a").Energy.Get("package").DynamicJ; got != 20 {
		t.Errorf("workload dynamic %v, want 20", got)
	}
	// The snapshot carries the model's estimate at the last utilization
	// (2 + 4×0.5 = 4 W) with its band.
	if len(s.Estimates) != 1 || s.Estimates[0].Name != "package" || s.Estimates[0].Watts != 4 || s.Estimates[0].LowerW != 4 || s.Estimates[0].UpperW != 4 || s.Estimates[0].Tier != "configuration" {
		t.Errorf("estimates %+v, want package at 4 W", s.Estimates)
	}
}

// A cgroup removed and created again under the same path (a restarted
// service) continues its series: counters carry on, never restart, and
// there is one workload for the path.
func TestRecreatedCgroupContinues(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	res := names{1: "/svc"}
	l := mustLoop(t, Config{Retention: time.Minute, IdleWatts: map[string]float64{"package": 0}}, src, m, res)
	t0 := time.Unix(0, 0)
	src.add(1, 10, 0, 0)
	l.Step(t0)
	src.add(1, 10, 0, 2e9)
	m.samples[0].Joules = 10
	l.Step(t0.Add(time.Second))
	// The service restarts: id 1 is gone, id 2 has the same path and
	// first shows up before the resolver knows it.
	delete(res, 1)
	src.r.Processes[0].Alive = false
	src.add(2, 11, 0, 1e9)
	m.samples[0].Joules = 16
	l.Step(t0.Add(2 * time.Second))
	if got := len(l.Snapshot().Cgroups); got != 2 {
		t.Fatalf("%d cgroup workloads, want /svc and a placeholder for id 2", got)
	}
	res[2] = "/svc"
	src.add(2, 11, 0, 1e9)
	m.samples[0].Joules = 20
	l.Step(t0.Add(3 * time.Second))
	s := l.Snapshot()
	if len(s.Cgroups) != 1 {
		t.Fatalf("cgroups %+v, want one /svc", s.Cgroups)
	}
	w := s.Cgroups[0]
	if w.Cgroup != "/svc" || w.CPUSeconds != 4 || w.Energy.Get("package").DynamicJ != 20 || !w.Alive || w.CgroupID != 2 {
		t.Errorf("continued series: %+v", w)
	}
	src.add(2, 11, 0, 1e9)
	m.samples[0].Joules = 22
	l.Step(t0.Add(4 * time.Second))
	if w := l.Snapshot().Cgroups[0]; w.CPUSeconds != 5 || w.Energy.Get("package").DynamicJ != 22 {
		t.Errorf("after the merge: %+v", w)
	}
}

// A platform meter beside RAPL: the platform zone is split like any other,
// conserving energy, and "other" = platform − (package + dram) stays at
// node level; each zone keeps its own source and method.
func TestPlatformZone(t *testing.T) {
	rapl := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "dram", Socket: 0}}}
	bmc := &namedMeter{fakeMeter{samples: []reading.ZoneSample{{Zone: "platform", Socket: -1}}}, "ipmi"}
	src := &fakeSource{}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 5, "dram": 1, "platform": 80}, IdlePolicy: "cpu"},
		src, power.Combine(rapl, bmc), names{1: "/a", 2: "/b"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	src.add(2, 2, 0, 0)
	l.Step(t0)
	for i := 1; i <= 10; i++ {
		src.add(1, 1, 0, 3e9)
		src.add(2, 2, 0, 1e9)
		rapl.samples[0].Joules += 60
		rapl.samples[1].Joules += 10
		bmc.samples[0].Joules += 200
		l.Step(t0.Add(time.Duration(i) * 2 * time.Second))
	}
	s := l.Snapshot()
	zones := map[string]snapshot.Zone{}
	for _, z := range s.Zones {
		zones[z.Name] = z
	}
	if o := zones["other"]; o.EnergyJ != 10*(200-70) || o.UnattributedJ != o.EnergyJ || o.Source != "derived" || o.Estimated {
		t.Errorf("other: %+v, want 1300 J unattributed, derived, measured", o)
	}
	p := zones["platform"]
	if p.Source != "ipmi" || p.IdleJ != 10*160 || p.EnergyJ != 2000 {
		t.Errorf("platform: %+v", p)
	}
	if zones["package"].Source != "rapl" {
		t.Errorf("package source %q", zones["package"].Source)
	}
	var sum float64
	for _, w := range s.Cgroups {
		e := w.Energy.Get("platform")
		sum += e.DynamicJ + e.IdleJ
	}
	if math.Abs(sum+p.UnattributedJ-p.EnergyJ) > 1e-9*p.EnergyJ {
		t.Errorf("platform: workloads %v + unattributed %v != %v", sum, p.UnattributedJ, p.EnergyJ)
	}
	if a := cgroupByPath(s, "/a").Energy.Get("platform"); math.Abs(a.DynamicJ-3*cgroupByPath(s, "/b").Energy.Get("platform").DynamicJ) > 1e-9 {
		t.Errorf("platform dynamic not split 3:1: %+v", a)
	}
}

type namedMeter struct {
	fakeMeter
	name string
}

func (m *namedMeter) Name() string { return m.name }

// modelMeter is a member that models rather than measures.
type modelMeter struct{ namedMeter }

func (m *modelMeter) Estimated() bool { return true }

// A combined meter labels each zone by the member that read it: measured
// RAPL zones beside an estimated platform stay measured, the platform is
// estimated, though the combined meter as a whole says it estimates. The
// loop asks the combined meter through its own CombinedMeter interface.
func TestCombinedMembersKeepTheirMethod(t *testing.T) {
	rapl := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	est := &modelMeter{namedMeter{fakeMeter{samples: []reading.ZoneSample{{Zone: "platform", Socket: -1}}}, "estimator"}}
	m := power.Combine(rapl, est)
	if !m.Estimated() {
		t.Fatal("the combined meter should say it estimates: the test proves nothing otherwise")
	}
	src := &fakeSource{}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 0, "platform": 0}, IdlePolicy: "none"},
		src, m, names{1: "/a"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	l.Step(t0)
	src.add(1, 1, 0, 1e9)
	rapl.samples[0].Joules += 30
	est.samples[0].Joules += 100
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	if z := zoneOf(s, "package", 0); z.Source != "rapl" || z.Estimated || z.EnergyJ != 30 {
		t.Errorf("package: source %q estimated %v %v J, want rapl, measured, 30 J", z.Source, z.Estimated, z.EnergyJ)
	}
	if z := zoneOf(s, "platform", -1); z.Source != "estimator" || !z.Estimated || z.EnergyJ != 100 {
		t.Errorf("platform: source %q estimated %v %v J, want estimator, estimated, 100 J", z.Source, z.Estimated, z.EnergyJ)
	}
}
