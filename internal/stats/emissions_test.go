package stats

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// gridFetcher is a network provider whose factor the test sets: a real
// provider wraps it, with the test's clock.
type gridFetcher struct {
	mu sync.Mutex
	s  carbon.Sample
}

func (g *gridFetcher) Name() string { return "grid" }
func (g *gridFetcher) Zone() string { return "XX" }
func (g *gridFetcher) Fetch(context.Context) (carbon.Sample, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.s, nil
}

func gramsOf(e snapshot.Emissions, provider string) float64 {
	var g float64
	for _, z := range e {
		if z.Provider == provider {
			g += z.DynamicG + z.IdleG
		}
	}
	return g
}

func nodeGrams(s *snapshot.Snapshot, provider string) (dyn, idle, unattr float64) {
	for _, z := range s.Zones {
		for _, g := range z.Grams {
			if g.Provider == provider {
				dyn, idle, unattr = dyn+g.DynamicG, idle+g.IdleG, unattr+g.UnattributedG
			}
		}
	}
	return
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

// A fixture RAPL tree, four cgroups (two of one Slurm job, a systemd unit,
// one of no workload) and a grid factor that changes every interval, goes
// stale for 40 s (the chain falls back to the constant 436 g/kWh) and
// comes back: every cgroup's, process's, workload's and the node's grams
// equal Σ over intervals of its ΔE × the factor the test put in force for
// that interval, to 1e-9 relative, per provider; Σ cgroups + unattributed
// + idle = node grams; and a factor that arrives later re-prices nothing.
func TestEmissionsExactWithChangingFactor(t *testing.T) {
	tree := newRAPLTree(t, 1, 262143328850)
	meter, err := power.NewRAPL(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	grid := &gridFetcher{}
	driver := carbon.NewProvider(grid, carbon.ProviderOptions{Now: clock})
	fallback := carbon.NewProvider(carbon.Constant{GramsPerKWh: 436}, carbon.ProviderOptions{Now: clock})
	if err := fallback.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	const staleness = 30 * time.Second
	chain := carbon.NewChain(staleness, driver, fallback)

	paths := names{
		1: "/slurm_n1/uid_0/job_42/step_0/task_0",
		2: "/slurm_n1/uid_0/job_42/step_batch",
		3: "/system.slice/nginx.service",
		4: "/user.slice/loose",
	}
	src := &fakeSource{}
	res := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Hour, IdlePolicy: "none", CPUs: 2,
		IdleWatts: map[string]float64{"package": 12, "dram": 3}}, src, meter, paths, nil,
		WithWorkloads(res, []ident.Kind{ident.KindJob, ident.KindSystemdUnit}), WithEmissions(chain))
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 4; id++ {
		src.add(id, uint32(id), 0, 0)
	}
	l.Step(now)

	type key struct {
		what     string
		provider string
	}
	want := map[key]float64{}
	seed := uint64(11)
	rnd := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	prev := l.Snapshot()
	var lastAt time.Time
	providers := map[string]int{}
	for i := 1; i <= 120; i++ {
		dt := time.Duration(1+rnd()%5) * time.Second
		now = now.Add(dt)
		// The grid publishes a new factor every interval, except
		// between intervals 40 and 59.
		if i < 40 || i >= 60 {
			grid.mu.Lock()
			grid.s = carbon.Sample{GramsPerKWh: float64(100 + rnd()%700), At: now}
			grid.mu.Unlock()
			if err := driver.Poll(context.Background()); err != nil {
				t.Fatal(err)
			}
			lastAt = now
		}
		provider, f := "grid", grid.s.GramsPerKWh
		if now.Sub(lastAt) > staleness {
			provider, f = "constant", 436
		}
		providers[provider]++
		for id := uint64(1); id <= 4; id++ {
			if rnd()%5 != 0 {
				src.add(id, uint32(id), int(id%2), rnd()%2e9)
			}
		}
		tree.advance("intel-rapl:0", uint64(dt.Seconds())*(5+rnd()%75)*1e6)
		tree.advance("intel-rapl:0:0", uint64(dt.Seconds())*(4+rnd()%20)*1e6)
		l.Step(now)
		s := l.Snapshot()
		for _, c := range s.Cgroups {
			p := cgroupByPath(prev, c.Cgroup)
			for _, e := range c.Energy {
				pe := p.Energy.Get(e.Zone)
				want[key{c.Cgroup, provider}] += (e.DynamicJ - pe.DynamicJ + e.IdleJ - pe.IdleJ) * f / 3.6e6
			}
		}
		for zi, z := range s.Zones {
			pz := prev.Zones[zi]
			want[key{"node", provider}] += (z.EnergyJ - pz.EnergyJ) * f / 3.6e6
			want[key{"idle", provider}] += (z.IdleJ - pz.IdleJ) * f / 3.6e6
			want[key{"unattributed", provider}] += (z.UnattributedJ - pz.UnattributedJ) * f / 3.6e6
		}
		prev = s
	}
	if providers["grid"] < 80 || providers["constant"] < 5 {
		t.Fatalf("factor schedule did not exercise both providers: %v", providers)
	}
	s := l.Snapshot()
	for _, provider := range []string{"grid", "constant"} {
		var sumCgroups float64
		for _, c := range s.Cgroups {
			got, w := gramsOf(c.Grams, provider), want[key{c.Cgroup, provider}]
			if w <= 0 || relErr(got, w) > 1e-9 {
				t.Errorf("cgroup %s %s: %.12g g, want %.12g", c.Cgroup, provider, got, w)
			}
			sumCgroups += got
		}
		for _, p := range s.Processes {
			got, w := gramsOf(p.Grams, provider), want[key{paths[uint64(p.PID)], provider}]
			if relErr(got, w) > 1e-9 {
				t.Errorf("process %d %s: %.12g g, want %.12g", p.PID, provider, got, w)
			}
		}
		job, ok := unitBy(s, ident.KindJob, "42")
		wJob := want[key{paths[1], provider}] + want[key{paths[2], provider}]
		if !ok || relErr(gramsOf(job.Grams, provider), wJob) > 1e-9 {
			t.Errorf("job 42 %s: %.12g g, want %.12g", provider, gramsOf(job.Grams, provider), wJob)
		}
		unit, ok := unitBy(s, ident.KindSystemdUnit, "nginx.service")
		if w := want[key{paths[3], provider}]; !ok || relErr(gramsOf(unit.Grams, provider), w) > 1e-9 {
			t.Errorf("unit nginx %s: %.12g g, want %.12g", provider, gramsOf(unit.Grams, provider), w)
		}
		dyn, idle, unattr := nodeGrams(s, provider)
		node := dyn + idle
		if relErr(node, want[key{"node", provider}]) > 1e-9 || relErr(idle, want[key{"idle", provider}]) > 1e-9 ||
			relErr(unattr, want[key{"unattributed", provider}]) > 1e-9 {
			t.Errorf("node %s: %.12g g (idle %.12g, unattributed %.12g), want %.12g (idle %.12g, unattributed %.12g)",
				provider, node, idle, unattr, want[key{"node", provider}], want[key{"idle", provider}], want[key{"unattributed", provider}])
		}
		if sum := sumCgroups + unattr + idle; relErr(sum, node) > 1e-9 {
			t.Errorf("%s: cgroups %.12g + unattributed %.12g + idle %.12g = %.12g g, node %.12g", provider, sumCgroups, unattr, idle, sum, node)
		}
		t.Logf("%s: %d intervals, node %.6f g, idle %.6f g, job 42 %.6f g", provider, providers[provider], node, idle, gramsOf(job.Grams, provider))
	}

	// A later factor never re-prices the past: a new grid value with no
	// energy in the interval adds nothing.
	before, _, _ := nodeGrams(s, "grid")
	job, _ := unitBy(s, ident.KindJob, "42")
	jobBefore := gramsOf(job.Grams, "grid")
	now = now.Add(time.Second)
	grid.mu.Lock()
	grid.s = carbon.Sample{GramsPerKWh: 1999, At: now}
	grid.mu.Unlock()
	if err := driver.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Step(now)
	s = l.Snapshot()
	after, _, _ := nodeGrams(s, "grid")
	job, _ = unitBy(s, ident.KindJob, "42")
	if after != before || gramsOf(job.Grams, "grid") != jobBefore {
		t.Errorf("a new factor with no new energy changed grams: node %v → %v, job %v → %v", before, after, jobBefore, gramsOf(job.Grams, "grid"))
	}
	if len(s.Intensities) != 2 || s.Intensities[0].GramsPerKWh != 1999 || len(s.Carbon) != 2 || s.Carbon[0].Source != "carbon/grid" {
		t.Errorf("snapshot intensities %+v, health %+v", s.Intensities, s.Carbon)
	}
}

// Before a provider first answers (a network provider down at start-up, no
// fallback) nothing is priced, for consumers and node alike, so the sums
// still agree; once it answers, only the energy of later intervals is
// priced: 60 J at 300 g/kWh = 0.005 g, 40 J to /a, 20 J to /b.
func TestEmissionsWaitForFirstFactor(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	grid := &gridFetcher{}
	p := carbon.NewProvider(grid, carbon.ProviderOptions{})
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none", IdleWatts: map[string]float64{"package": 0}},
		src, m, names{1: "/a", 2: "/b"}, nil, WithEmissions(carbon.NewChain(0, p)))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	src.add(2, 2, 0, 0)
	l.Step(t0)
	step := func(j float64) {
		src.add(1, 1, 0, 2e9)
		src.add(2, 2, 0, 1e9)
		m.samples[0].Joules += j
		t0 = t0.Add(time.Second)
		l.Step(t0)
	}
	step(90)
	s := l.Snapshot()
	if len(s.Zones[0].Grams) != 0 || len(cgroupByPath(s, "/a").Grams) != 0 || len(s.Intensities) != 0 || s.Carbon[0].Up {
		t.Fatalf("priced without a factor: zone %+v, /a %+v, intensities %+v", s.Zones[0].Grams, cgroupByPath(s, "/a").Grams, s.Intensities)
	}
	grid.s = carbon.Sample{GramsPerKWh: 300}
	if err := p.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	step(60)
	s = l.Snapshot()
	for _, c := range []struct {
		got, want float64
	}{
		{s.Zones[0].Grams[0].DynamicG, 60 * 300 / 3.6e6},
		{gramsOf(cgroupByPath(s, "/a").Grams, "grid"), 40 * 300 / 3.6e6},
		{gramsOf(cgroupByPath(s, "/b").Grams, "grid"), 20 * 300 / 3.6e6},
	} {
		if relErr(c.got, c.want) > 1e-12 {
			t.Errorf("%.12g g, want %.12g", c.got, c.want)
		}
	}
}
