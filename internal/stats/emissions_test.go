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

// gramsKey is what TestEmissionsExactWithChangingFactor expects grams of
// under one provider: a cgroup (its path), or the node's "node", "idle"
// and "unattributed".
type gramsKey struct {
	what     string
	provider string
}

// lcg is a linear congruential generator: the same numbers every run.
type lcg uint64

func (s *lcg) next() uint64 {
	*s = *s*6364136223846793005 + 1442695040888963407
	return uint64(*s) >> 33
}

// emissionsRun is TestEmissionsExactWithChangingFactor's node: a fixture
// RAPL tree, four cgroups and a grid provider whose factor the test sets,
// with the constant 436 g/kWh behind it once the grid's is 30 s old.
type emissionsRun struct {
	t      *testing.T
	policy string // stats.idle-policy
	now    time.Time
	tree   *raplTree
	grid   *gridFetcher
	driver *carbon.Provider
	src    *fakeSource
	paths  names
	l      *Loop
	rnd    lcg
	// lastAt is when the grid last published a factor.
	lastAt time.Time
}

const emissionsStaleness = 30 * time.Second

func newEmissionsRun(t *testing.T, policy string) *emissionsRun {
	e := &emissionsRun{t: t, policy: policy, now: time.Unix(1_700_000_000, 0), tree: newRAPLTree(t, 1, 262143328850), grid: &gridFetcher{},
		src: &fakeSource{}, rnd: 11}
	meter, err := power.NewRAPL(e.tree.root)
	if err != nil {
		t.Fatal(err)
	}
	clock := func() time.Time { return e.now }
	e.driver = carbon.NewProvider(e.grid, carbon.ProviderOptions{Now: clock})
	fallback := carbon.NewProvider(carbon.Constant{GramsPerKWh: 436}, carbon.ProviderOptions{Now: clock})
	if err := fallback.Poll(context.Background()); err != nil {
		t.Fatal(err)
	}
	chain := carbon.NewChain(emissionsStaleness, e.driver, fallback)
	e.paths = names{
		1: "/slurm_n1/uid_0/job_42/step_0/task_0",
		2: "/slurm_n1/uid_0/job_42/step_batch",
		3: "/system.slice/nginx.service",
		4: "/user.slice/loose",
	}
	res := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	e.l, err = New(Config{Interval: time.Second, Retention: time.Hour, IdlePolicy: policy, CPUs: 2,
		IdleWatts: map[string]float64{"package": 12, "dram": 3}}, e.src, meter, e.paths, nil,
		WithWorkloads(res, []ident.Kind{ident.KindJob, ident.KindSystemdUnit}), WithEmissions(chain))
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 4; id++ {
		e.src.add(id, uint32(id), 0, 0)
	}
	e.l.Step(e.now)
	return e
}

// publish has the grid publish gramsPerKWh now, and the provider take it.
func (e *emissionsRun) publish(gramsPerKWh float64) {
	e.grid.mu.Lock()
	e.grid.s = carbon.Sample{GramsPerKWh: gramsPerKWh, At: e.now}
	e.grid.mu.Unlock()
	if err := e.driver.Poll(context.Background()); err != nil {
		e.t.Fatal(err)
	}
}

// step runs interval i, 1 to 5 s long: the grid publishes a new factor
// (except between intervals 40 and 59), each cgroup runs for a random
// time or not at all (none runs in intervals 55 to 57, under the
// constant factor, and 70 to 72, under the grid's: their dynamic energy is
// nobody's, unattributed), and the package and DRAM draw random power. It says which provider's factor is in force, and the factor.
func (e *emissionsRun) step(i int) (string, float64) {
	dt := time.Duration(1+e.rnd.next()%5) * time.Second
	e.now = e.now.Add(dt)
	if i < 40 || i >= 60 {
		e.publish(float64(100 + e.rnd.next()%700))
		e.lastAt = e.now
	}
	provider, f := "grid", e.grid.s.GramsPerKWh
	if e.now.Sub(e.lastAt) > emissionsStaleness {
		provider, f = "constant", 436
	}
	for id := uint64(1); id <= 4; id++ {
		if e.rnd.next()%5 != 0 && !idleInterval(i) {
			e.src.add(id, uint32(id), int(id%2), e.rnd.next()%2e9)
		}
	}
	e.tree.advance("intel-rapl:0", uint64(dt.Seconds())*(5+e.rnd.next()%75)*1e6)
	e.tree.advance("intel-rapl:0:0", uint64(dt.Seconds())*(4+e.rnd.next()%20)*1e6)
	e.l.Step(e.now)
	return provider, f
}

// idleInterval reports whether no cgroup runs in interval i.
func idleInterval(i int) bool { return i >= 55 && i < 58 || i >= 70 && i < 73 }

// accrue adds to want the grams of the interval from prev to s, each
// cgroup's and the node's energy of the interval × f. The idle of an
// interval in which no cgroup got any energy is "unowned": under every
// idle policy nobody had a share of it (under none, nobody has any idle).
func accrue(want map[gramsKey]float64, prev, s *snapshot.Snapshot, provider string, f float64) {
	var cgroupsJ float64
	for _, c := range s.Cgroups {
		p := cgroupByPath(prev, c.Cgroup)
		for _, e := range c.Energy {
			pe := p.Energy.Get(e.Zone)
			dE := e.DynamicJ - pe.DynamicJ + e.IdleJ - pe.IdleJ
			want[gramsKey{c.Cgroup, provider}] += dE * f / 3.6e6
			cgroupsJ += dE
		}
	}
	for zi, z := range s.Zones {
		pz := prev.Zones[zi]
		want[gramsKey{"node", provider}] += (z.EnergyJ - pz.EnergyJ) * f / 3.6e6
		want[gramsKey{"idle", provider}] += (z.IdleJ - pz.IdleJ) * f / 3.6e6
		want[gramsKey{"unattributed", provider}] += (z.UnattributedJ - pz.UnattributedJ) * f / 3.6e6
		if cgroupsJ == 0 {
			want[gramsKey{"unowned idle", provider}] += (z.IdleJ - pz.IdleJ) * f / 3.6e6
		}
	}
}

// checkGrams checks one provider's grams in s against want, to 1e-9
// relative: each cgroup's (each must have some), process's, job 42's
// (its two cgroups), the nginx unit's and the node's (all, idle,
// unattributed, each of which must be some), and that the parts add up to
// the node: Σ cgroups + unattributed + the idle nobody owns = node, where
// under idle policy none nobody owns any idle, and under the others the
// cgroups own all of it but that of the intervals in which nothing ran.
func (e *emissionsRun) checkGrams(s *snapshot.Snapshot, want map[gramsKey]float64, provider string, intervals int) {
	t := e.t
	t.Helper()
	var sumCgroups float64
	for _, c := range s.Cgroups {
		got, w := gramsOf(c.Grams, provider), want[gramsKey{c.Cgroup, provider}]
		if w <= 0 || relErr(got, w) > 1e-9 {
			t.Errorf("cgroup %s %s: %.12g g, want %.12g", c.Cgroup, provider, got, w)
		}
		sumCgroups += got
	}
	for _, p := range s.Processes {
		got, w := gramsOf(p.Grams, provider), want[gramsKey{e.paths[uint64(p.PID)], provider}]
		if relErr(got, w) > 1e-9 {
			t.Errorf("process %d %s: %.12g g, want %.12g", p.PID, provider, got, w)
		}
	}
	job, ok := unitBy(s, ident.KindJob, "42")
	wJob := want[gramsKey{e.paths[1], provider}] + want[gramsKey{e.paths[2], provider}]
	if !ok || relErr(gramsOf(job.Grams, provider), wJob) > 1e-9 {
		t.Errorf("job 42 %s: %.12g g, want %.12g", provider, gramsOf(job.Grams, provider), wJob)
	}
	unit, ok := unitBy(s, ident.KindSystemdUnit, "nginx.service")
	if w := want[gramsKey{e.paths[3], provider}]; !ok || relErr(gramsOf(unit.Grams, provider), w) > 1e-9 {
		t.Errorf("unit nginx %s: %.12g g, want %.12g", provider, gramsOf(unit.Grams, provider), w)
	}
	dyn, idle, unattr := nodeGrams(s, provider)
	node := dyn + idle
	wNode, wIdle, wUnattr := want[gramsKey{"node", provider}], want[gramsKey{"idle", provider}], want[gramsKey{"unattributed", provider}]
	if relErr(node, wNode) > 1e-9 || relErr(idle, wIdle) > 1e-9 || relErr(unattr, wUnattr) > 1e-9 {
		t.Errorf("node %s: %.12g g (idle %.12g, unattributed %.12g), want %.12g (idle %.12g, unattributed %.12g)",
			provider, node, idle, unattr, wNode, wIdle, wUnattr)
	}
	if wUnattr <= 0 || wIdle <= 0 {
		t.Errorf("%s: unattributed %.12g g, idle %.12g g: the scenario must have both", provider, wUnattr, wIdle)
	}
	unowned := idle // idle grams no consumer has
	if e.policy != "none" {
		unowned = want[gramsKey{"unowned idle", provider}]
		if unowned <= 0 || unowned >= idle {
			t.Errorf("%s, idle policy %s: the idle of the intervals in which nothing ran is %.12g g of %.12g", provider, e.policy, unowned, idle)
		}
		var cgroupIdle float64
		for _, c := range s.Cgroups {
			for _, g := range c.Grams {
				if g.Provider == provider {
					cgroupIdle += g.IdleG
				}
			}
		}
		if relErr(cgroupIdle, idle-unowned) > 1e-9 {
			t.Errorf("%s, idle policy %s: the cgroups' idle %.12g g, the node's %.12g less the unowned %.12g", provider, e.policy, cgroupIdle, idle, unowned)
		}
	}
	if sum := sumCgroups + unattr + unowned; relErr(sum, node) > 1e-9 {
		t.Errorf("%s: cgroups %.12g + unattributed %.12g + unowned idle %.12g = %.12g g, node %.12g", provider, sumCgroups, unattr, unowned, sum, node)
	}
	t.Logf("%s: %d intervals, node %.6f g, idle %.6f g, job 42 %.6f g", provider, intervals, node, idle, gramsOf(job.Grams, provider))
}

// checkNoRepricing: a new grid factor (1999 g/kWh) with no energy in the
// interval adds nothing to the node's or job 42's grams, and the snapshot
// shows it in force.
func (e *emissionsRun) checkNoRepricing(s *snapshot.Snapshot) {
	t := e.t
	t.Helper()
	before, _, _ := nodeGrams(s, "grid")
	job, _ := unitBy(s, ident.KindJob, "42")
	jobBefore := gramsOf(job.Grams, "grid")
	e.now = e.now.Add(time.Second)
	e.publish(1999)
	e.l.Step(e.now)
	s = e.l.Snapshot()
	after, _, _ := nodeGrams(s, "grid")
	job, _ = unitBy(s, ident.KindJob, "42")
	if after != before || gramsOf(job.Grams, "grid") != jobBefore {
		t.Errorf("a new factor with no new energy changed grams: node %v → %v, job %v → %v", before, after, jobBefore, gramsOf(job.Grams, "grid"))
	}
	if len(s.Intensities) != 2 || s.Intensities[0].GramsPerKWh != 1999 || len(s.Carbon) != 2 || s.Carbon[0].Source != "carbon/grid" {
		t.Errorf("snapshot intensities %+v, health %+v", s.Intensities, s.Carbon)
	}
}

// A fixture RAPL tree, four cgroups (two of one Slurm job, a systemd unit,
// one of no workload) and a grid factor that changes every interval, goes
// stale for 40 s (the chain falls back to the constant 436 g/kWh) and
// comes back: every cgroup's, process's, workload's and the node's grams
// equal Σ over intervals of its ΔE × the factor the test put in force for
// that interval, to 1e-9 relative, per provider; the parts add up to the
// node's grams; and a factor that arrives later re-prices nothing. Under
// each idle policy, with intervals in which nothing ran: the idle and
// unattributed terms are both there to get wrong.
func TestEmissionsExactWithChangingFactor(t *testing.T) {
	for _, policy := range []string{"none", "cpu", "even"} {
		t.Run(policy, func(t *testing.T) { emissionsExact(t, policy) })
	}
}

func emissionsExact(t *testing.T, policy string) {
	e := newEmissionsRun(t, policy)
	want := map[gramsKey]float64{}
	prev := e.l.Snapshot()
	providers := map[string]int{}
	for i := 1; i <= 120; i++ {
		provider, f := e.step(i)
		providers[provider]++
		s := e.l.Snapshot()
		accrue(want, prev, s, provider, f)
		prev = s
	}
	if providers["grid"] < 80 || providers["constant"] < 5 {
		t.Fatalf("factor schedule did not exercise both providers: %v", providers)
	}
	s := e.l.Snapshot()
	for _, provider := range []string{"grid", "constant"} {
		e.checkGrams(s, want, provider, providers[provider])
	}
	e.checkNoRepricing(s)
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
