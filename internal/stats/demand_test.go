package stats

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Fewer steps lose nothing: two loops read the same cumulative counters
// over the same 60 s, one stepping every second and one every 15 s (as a
// 15 s scrape drives it on demand). The node's energy and grams, every
// cgroup's, process's and job's CPU, energy and grams, come out the same.
// The meter is a linear estimator zone, so energy is proportional to CPU
// time and the split of a 15 s window equals the sum of its 1 s splits;
// with a measured meter whose power per CPU-second varies inside a window
// the node's totals stay exact and the split is the window's; an
// estimator curve that bends is applied to each window's mean utilization
// (docs/configuration.md).
func TestFewerStepsSameTotals(t *testing.T) {
	paths := names{
		1: "/slurm/uid_0/job_1/step_batch",
		2: "/slurm/uid_0/job_2/step_batch",
		3: "/slurm/uid_0/job_2/step_0",
		4: "/system.slice/nginx.service",
		5: "/loose",
	}
	type run struct {
		src  *fakeSource
		loop *Loop
	}
	mk := func() run {
		est, err := power.NewEstimator(power.LinearZone("package", 20, 80))
		if err != nil {
			t.Fatal(err)
		}
		src := &fakeSource{}
		res := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
		l, err := New(Config{Interval: time.Second, Retention: time.Hour, IdlePolicy: "none", CPUs: 4},
			src, est, paths, nil,
			WithWorkloads(res, []ident.Kind{ident.KindJob, ident.KindSystemdUnit}),
			WithEmissions(fixedIntensity{g: 300}))
		if err != nil {
			t.Fatal(err)
		}
		return run{src, l}
	}
	fine, coarse := mk(), mk()
	start := time.Unix(1_700_000_000, 0)
	for _, r := range []run{fine, coarse} {
		for id := uint64(1); id <= 5; id++ {
			r.src.add(id, uint32(10*id), 0, 0)
		}
		r.loop.Step(start)
	}
	seed := uint64(7)
	rnd := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	for s := 1; s <= 60; s++ {
		// A busy second for some consumers, idle for others: the
		// shares change from second to second.
		for id := uint64(1); id <= 5; id++ {
			ns := (rnd() % 800) * uint64(time.Millisecond)
			if rnd()%3 == 0 {
				ns = 0
			}
			pid := uint32(10*id + uint64(s/20)) // processes come and go
			fine.src.add(id, pid, int(id%4), ns)
			coarse.src.add(id, pid, int(id%4), ns)
		}
		now := start.Add(time.Duration(s) * time.Second)
		fine.loop.Step(now)
		if s%15 == 0 {
			coarse.loop.Step(now)
		}
	}
	if got := fine.loop.Steps(); got != 61 {
		t.Fatalf("fine loop stepped %d times, want 61", got)
	}
	if got := coarse.loop.Steps(); got != 5 {
		t.Fatalf("coarse loop stepped %d times, want 5", got)
	}
	a, b := fine.loop.Snapshot(), coarse.loop.Snapshot()
	near := func(what string, x, y float64) {
		t.Helper()
		if math.Abs(x-y) > 1e-9*math.Max(1, math.Abs(x)) {
			t.Errorf("%s: every 1 s %.12g, every 15 s %.12g", what, x, y)
		}
	}
	var nodeJ float64
	for _, z := range a.Zones {
		nodeJ += z.EnergyJ
	}
	if nodeJ < 60*4*5 {
		t.Fatalf("node energy %.1f J: less than idle, the test is not exercising the meter", nodeJ)
	}
	for i, z := range a.Zones {
		near("zone "+z.Name+" energy", z.EnergyJ, b.Zones[i].EnergyJ)
		near("zone "+z.Name+" dynamic", z.DynamicJ, b.Zones[i].DynamicJ)
		dg, _, _ := nodeGrams(a, "test")
		dg2, _, _ := nodeGrams(b, "test")
		near("node dynamic grams", dg, dg2)
	}
	consumers := func(what string, xs, ys []*snapshot.Consumer) {
		t.Helper()
		if len(xs) != len(ys) {
			t.Fatalf("%s: %d vs %d", what, len(xs), len(ys))
		}
		key := func(c *snapshot.Consumer) [2]uint64 { return [2]uint64{c.CgroupID, uint64(c.PID)} }
		by := map[[2]uint64]*snapshot.Consumer{}
		for _, y := range ys {
			by[key(y)] = y
		}
		for _, x := range xs {
			y, ok := by[key(x)]
			if !ok {
				t.Errorf("%s %v missing with 15 s steps", what, key(x))
				continue
			}
			near(what+" "+x.Cgroup+" CPU", x.CPUSeconds, y.CPUSeconds)
			near(what+" "+x.Cgroup+" energy", x.Energy.Get("package").DynamicJ, y.Energy.Get("package").DynamicJ)
			near(what+" "+x.Cgroup+" grams", gramsOf(x.Grams, "test"), gramsOf(y.Grams, "test"))
		}
	}
	// The roll-up marks the cgroups it exports at a workload level.
	for _, c := range a.Cgroups {
		if want := c.Cgroup != "/loose"; c.InWorkload != want {
			t.Errorf("cgroup %s: InWorkload %v, want %v", c.Cgroup, c.InWorkload, want)
		}
	}
	consumers("cgroup", a.Cgroups, b.Cgroups)
	consumers("process", a.Processes, b.Processes)
	if len(a.Workloads) != len(b.Workloads) || len(a.Workloads) < 3 {
		t.Fatalf("workloads: %d vs %d", len(a.Workloads), len(b.Workloads))
	}
	wkey := func(w snapshot.Workload) string { return w.Level + fmt.Sprint(w.Labels) }
	byKey := map[string]snapshot.Workload{}
	for _, w := range b.Workloads {
		byKey[wkey(w)] = w
	}
	var jobsJ float64
	for _, w := range a.Workloads {
		v, ok := byKey[wkey(w)]
		if !ok {
			t.Fatalf("workload %s missing with 15 s steps", wkey(w))
		}
		near("workload CPU", w.CPUSeconds, v.CPUSeconds)
		near("workload energy", w.Energy.Get("package").DynamicJ, v.Energy.Get("package").DynamicJ)
		near("workload grams", gramsOf(w.Grams, "test"), gramsOf(v.Grams, "test"))
		jobsJ += w.Energy.Get("package").DynamicJ
	}
	if jobsJ <= 0 {
		t.Fatal("no energy reached the workloads")
	}
}

// On demand, the loop steps when asked and otherwise not at all (within
// its gap); concurrent callers share one step; in timer mode it steps
// every interval whether asked or not.
func TestFreshStepsOnDemand(t *testing.T) {
	const interval = 40 * time.Millisecond
	mk := func(onDemand bool) (*Loop, context.CancelFunc, chan struct{}) {
		src := &fakeSource{}
		src.add(1, 1, 0, 1e6)
		l := mustLoop(t, Config{Interval: interval, OnDemand: onDemand, MaxGap: time.Hour},
			src, &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Joules: 1}}}, anyName{})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = l.Run(ctx); close(done) }()
		deadline := time.Now().Add(5 * time.Second)
		for l.Steps() < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if l.Steps() < 2 {
			t.Fatal("no first interval")
		}
		return l, cancel, done
	}
	l, cancel, done := mk(true)
	if l.Gap() != time.Hour {
		t.Errorf("gap %v, want the configured max gap (1h)", l.Gap())
	}
	time.Sleep(10 * interval)
	if got := l.Steps(); got != 2 {
		t.Errorf("on demand, unasked: %d steps after 10 intervals, want 2 (baseline and first)", got)
	}
	before := l.Snapshot()
	var wg sync.WaitGroup
	snaps := make([]*snapshot.Snapshot, 8)
	for i := range snaps {
		wg.Add(1)
		go func() { defer wg.Done(); snaps[i] = l.Fresh(context.Background(), 0) }()
	}
	wg.Wait()
	if got := l.Steps(); got != 3 {
		t.Errorf("8 concurrent scrapes of a stale snapshot: %d steps, want 3", got)
	}
	for i, s := range snaps {
		if s == nil || s == before || time.Since(s.Time) > interval {
			t.Fatalf("scrape %d got a stale snapshot", i)
		}
	}
	// A fresh snapshot is served as it is.
	if s := l.Fresh(context.Background(), time.Hour); s != snaps[0] || l.Steps() != 3 {
		t.Errorf("a fresh snapshot stepped the loop (%d steps)", l.Steps())
	}
	cancel()
	<-done
	// After Run ends Fresh does not block.
	if s := l.Fresh(context.Background(), time.Nanosecond); s != snaps[0] {
		t.Error("Fresh after Run stepped or lost the snapshot")
	}

	l, cancel, done = mk(false)
	time.Sleep(10 * interval)
	if got := l.Steps(); got < 6 {
		t.Errorf("timer mode: %d steps after 10 intervals, want ≥ 6", got)
	}
	cancel()
	<-done
}

// The gap honours a wrapping meter: a RAPL counter of 262 kJ at its
// 1 kW ceiling could wrap after 262 s, so the loop reads it at least every
// 131 s however long stats.max-gap is; never more often than the interval.
func TestGapFromWrappingMeter(t *testing.T) {
	tree := newRAPLTree(t, 1, 262143328850)
	meter, err := power.NewRAPL(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	l := mustLoop(t, Config{Interval: 5 * time.Second, OnDemand: true, MaxGap: time.Hour}, &fakeSource{}, meter, anyName{})
	// dram's default ceiling is 500 W: 262 kJ / 500 W / 2 = 262 s; the
	// package's 1000 W gives 131 s.
	if got, want := l.Gap(), time.Duration(131071664425); got != want {
		t.Errorf("gap %v, want %v", got, want)
	}
	// And a read at that gap counts a wrap. The exporter's RAPL meter
	// (ceilings, on a clock the test sets) starts both counters 5 J below
	// their range; they run at 90% of their ceilings for the whole gap,
	// so each wraps once, and the node's energy still grows by watts ×
	// gap: nothing lost to the wrap, nothing rejected as too fast.
	t0 := time.Unix(0, 0)
	clock := t0
	cmeter, err := power.NewRAPLWith(tree.root, power.MeterOptions{Now: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	l = mustLoop(t, Config{Interval: 5 * time.Second, OnDemand: true, MaxGap: time.Hour}, &fakeSource{}, cmeter, anyName{})
	gap := l.Gap()
	if gap != time.Duration(131071664425) {
		t.Fatalf("gap %v with the ceilings applied, want 131.07 s", gap)
	}
	l.Step(t0)
	before := zoneEnergy(l.Snapshot())
	pkg0, dram0 := tree.uj["intel-rapl:0"], tree.uj["intel-rapl:0:0"]
	wantPkg, wantDram := 900*gap.Seconds(), 450*gap.Seconds()
	tree.advance("intel-rapl:0", uint64(math.Round(wantPkg*1e6)))
	tree.advance("intel-rapl:0:0", uint64(math.Round(wantDram*1e6)))
	if tree.uj["intel-rapl:0"] >= pkg0 || tree.uj["intel-rapl:0:0"] >= dram0 {
		t.Fatalf("the counters did not wrap: package %d -> %d, dram %d -> %d", pkg0, tree.uj["intel-rapl:0"], dram0, tree.uj["intel-rapl:0:0"])
	}
	clock = t0.Add(gap)
	l.Step(clock)
	after := zoneEnergy(l.Snapshot())
	for zone, want := range map[string]float64{"package": wantPkg, "dram": wantDram} {
		if got := after[zone] - before[zone]; math.Abs(got-want) > 1e-6 {
			t.Errorf("%s grew %.6f J across a wrap in %v, want %.6f J", zone, got, gap, want)
		}
	}
	l = mustLoop(t, Config{Interval: 5 * time.Second, OnDemand: true, MaxGap: 30 * time.Second}, &fakeSource{}, meter, anyName{})
	if got := l.Gap(); got != 30*time.Second {
		t.Errorf("gap %v, want stats.max-gap 30s", got)
	}
	l = mustLoop(t, Config{Interval: 5 * time.Second}, &fakeSource{}, meter, anyName{})
	if got := l.Gap(); got != 5*time.Second {
		t.Errorf("timer mode: gap %v, want the interval", got)
	}
	if _, err := New(Config{Interval: time.Second, IdlePolicy: "none", MaxGap: -1}, &fakeSource{}, meter, anyName{}, nil); err == nil {
		t.Error("a negative stats.max-gap was accepted")
	}
}

// zoneEnergy is each zone's node energy in s, by zone name.
func zoneEnergy(s *snapshot.Snapshot) map[string]float64 {
	out := map[string]float64{}
	for _, z := range s.Zones {
		out[z.Name] += z.EnergyJ
	}
	return out
}

// switchingIntensity is a carbon-intensity source whose factor the test
// changes.
type switchingIntensity struct {
	mu sync.Mutex
	g  float64
}

func (s *switchingIntensity) set(g float64) { s.mu.Lock(); s.g = g; s.mu.Unlock() }
func (s *switchingIntensity) Factor() (reading.CarbonFactor, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return reading.CarbonFactor{Provider: "test", Zone: "XX", GramsPerKWh: s.g}, true
}
func (*switchingIntensity) Intensities() []reading.Intensity { return nil }
func (*switchingIntensity) Health() []reading.SourceHealth   { return nil }

// Emissions keep their own cadence: on demand, a change of the carbon
// intensity steps the loop within an interval, and the energy used before
// the change is priced at the factor it was used under.
func TestFactorChangeSteps(t *testing.T) {
	const interval = 30 * time.Millisecond
	src := &fakeSource{}
	src.add(1, 1, 0, 1e6)
	meter := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Joules: 0}}}
	var mu sync.Mutex
	grid := &switchingIntensity{g: 100}
	l, err := New(Config{Interval: interval, IdlePolicy: "none", OnDemand: true, MaxGap: time.Hour},
		src, &lockedMeter{m: meter, mu: &mu}, anyName{}, nil, WithEmissions(grid))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	waitSteps := func(n uint64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for l.Steps() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if l.Steps() < n {
			t.Fatalf("%d steps, want %d", l.Steps(), n)
		}
	}
	waitSteps(2)
	time.Sleep(3 * interval)
	if l.Steps() != 2 {
		t.Fatalf("stepped without a change: %d", l.Steps())
	}
	mu.Lock()
	meter.samples[0].Joules = 3.6e6 // 1 kWh under 100 g/kWh
	mu.Unlock()
	grid.set(500)
	waitSteps(3)
	total := func(s *snapshot.Snapshot) float64 { d, i, _ := nodeGrams(s, "test"); return d + i } // unattributed is part of dynamic
	if g := total(l.Snapshot()); math.Abs(g-100) > 1e-9 {
		t.Errorf("energy before the change priced at %.6g g, want 100 (the old factor)", g)
	}
	mu.Lock()
	meter.samples[0].Joules = 2 * 3.6e6 // another kWh, under 500 g/kWh
	mu.Unlock()
	time.Sleep(2 * interval)
	s := l.Fresh(context.Background(), time.Nanosecond)
	if g := total(s); math.Abs(g-600) > 1e-9 {
		t.Errorf("node grams %.6g, want 600", g)
	}
}

// lockedMeter lets a test change a fakeMeter while the loop's goroutine
// reads it.
type lockedMeter struct {
	m  *fakeMeter
	mu *sync.Mutex
}

func (l *lockedMeter) Name() string    { return l.m.Name() }
func (l *lockedMeter) Estimated() bool { return false }
func (l *lockedMeter) Read(_ context.Context) ([]reading.ZoneSample, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m.Read(context.Background())
}

// Asks at a regular period longer than the interval (Prometheus scrapes)
// are met by a step just before each: the ask finds a fresh snapshot and
// waits for no step, and the loop still steps once per ask.
func TestStepBeforeExpectedAsk(t *testing.T) {
	const interval = 100 * time.Millisecond
	const period = 400 * time.Millisecond
	src := &fakeSource{}
	src.add(1, 1, 0, 1e6)
	l := mustLoop(t, Config{Interval: interval, OnDemand: true, MaxGap: time.Hour},
		src, &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Joules: 1}}}, anyName{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = l.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(5 * time.Second); l.Steps() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	var waited []uint64 // steps taken inside each ask
	start := time.Now()
	for i := 0; i < 6; i++ {
		time.Sleep(time.Until(start.Add(time.Duration(i) * period)))
		before := l.Steps()
		s := l.Fresh(context.Background(), 0)
		after := l.Steps()
		if s == nil || time.Since(s.Time) > interval {
			t.Fatalf("ask %d: snapshot %v old", i, time.Since(s.Time))
		}
		waited = append(waited, after-before)
	}
	// The first asks step themselves; once the period is known (two
	// equal gaps) the step comes before the ask.
	for i := 3; i < len(waited); i++ {
		if waited[i] != 0 {
			t.Errorf("ask %d stepped inside the scrape (steps inside each ask: %v)", i, waited)
		}
	}
	if got := l.Steps(); got > 2+6+1 {
		t.Errorf("%d steps for 6 asks: pre-stepping must not add steps", got)
	}
}
