package stats

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
)

// raplTree is a powercap sysfs tree whose counters the test advances.
type raplTree struct {
	t    *testing.T
	root string
	uj   map[string]uint64 // zone dir → energy_uj
	max  uint64
}

// newRAPLTree makes sockets package zones, each with a dram sub-zone.
func newRAPLTree(t *testing.T, sockets int, maxUJ uint64) *raplTree {
	r := &raplTree{t: t, root: t.TempDir(), uj: map[string]uint64{}, max: maxUJ}
	for s := 0; s < sockets; s++ {
		r.zone(fmt.Sprintf("intel-rapl:%d", s), fmt.Sprintf("package-%d", s))
		r.zone(fmt.Sprintf("intel-rapl:%d:0", s), "dram")
	}
	return r
}

func (r *raplTree) zone(dir, name string) {
	d := filepath.Join(r.root, "class", "powercap", dir)
	if err := os.MkdirAll(d, 0o755); err != nil {
		r.t.Fatal(err)
	}
	r.write(d, "name", name)
	r.write(d, "max_energy_range_uj", fmt.Sprint(r.max))
	// Start near the top so the counters wrap during the test.
	r.uj[dir] = r.max - 5_000_000
	r.write(d, "energy_uj", fmt.Sprint(r.uj[dir]))
}

func (r *raplTree) write(dir, file, v string) {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(v+"\n"), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// advance adds uj to a zone's counter, wrapping at max_energy_range_uj
// (the meter takes a wrap to be worth max_energy_range_uj; the hardware's
// true modulus is one energy unit, ~15–61 µJ, more).
func (r *raplTree) advance(dir string, uj uint64) {
	r.uj[dir] = (r.uj[dir] + uj) % r.max
	r.write(filepath.Join(r.root, "class", "powercap", dir), "energy_uj", fmt.Sprint(r.uj[dir]))
}

// A fixture RAPL tree whose counters advance and wrap, with configured idle
// power: idle is exactly watts × Δt (or ΔE where clamped), and workloads +
// unattributed + idle = node energy per zone to 1e-9 over 100 intervals.
func TestRAPLFixtureConservation(t *testing.T) {
	tree := newRAPLTree(t, 1, 262143328850)
	meter, err := power.NewRAPL(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	const idlePkg, idleDram = 12.0, 3.0
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": idlePkg, "dram": idleDram}, CPUs: 2}, src, meter, anyName{})
	t0 := time.Unix(0, 0)
	l.Step(t0)
	seed := uint64(7)
	rnd := func() uint64 { seed = seed*6364136223846793005 + 1442695040888963407; return seed >> 33 }
	prev := l.Snapshot()
	var clamps int
	for i := 1; i <= 100; i++ {
		for w := uint64(0); w < 40; w++ {
			if rnd()%4 != 0 {
				src.add(w, uint32(w+1), 0, rnd()%2e9)
			}
		}
		dt := time.Duration(1+rnd()%5) * time.Second
		// Package 5–80 J/s: sometimes below its 12 W idle, so it clamps.
		tree.advance("intel-rapl:0", uint64(dt.Seconds())*(5+rnd()%75)*1e6)
		tree.advance("intel-rapl:0:0", uint64(dt.Seconds())*(4+rnd()%20)*1e6)
		t0 = t0.Add(dt)
		l.Step(t0)
		s := l.Snapshot()
		for zi, z := range s.Zones {
			p := prev.Zones[zi]
			dE, dIdle := z.EnergyJ-p.EnergyJ, z.IdleJ-p.IdleJ
			watts := idlePkg
			if z.Name == "dram" {
				watts = idleDram
			}
			want := math.Min(watts*dt.Seconds(), dE)
			if want < watts*dt.Seconds() {
				clamps++
			}
			if math.Abs(dIdle-want) > 1e-9*want {
				t.Fatalf("interval %d %s: idle %v J, want %v (ΔE %v)", i, z.Name, dIdle, want, dE)
			}
		}
		prev = s
	}
	s := l.Snapshot()
	for _, z := range s.Zones {
		var dyn float64
		for _, w := range s.Cgroups {
			dyn += w.Energy.Get(z.Name).DynamicJ
		}
		sum := dyn + z.UnattributedJ + z.IdleJ
		if rel := math.Abs(sum-z.EnergyJ) / z.EnergyJ; rel > 1e-9 {
			t.Errorf("%s: workloads %v + unattributed %v + idle %v = %v, node %v (%.2g relative)",
				z.Name, dyn, z.UnattributedJ, z.IdleJ, sum, z.EnergyJ, rel)
		}
		if z.Source != "rapl" || z.Estimated {
			t.Errorf("%s: source %q estimated %v", z.Name, z.Source, z.Estimated)
		}
	}
	if clamps == 0 {
		t.Error("no interval exercised the idle clamp")
	}
	if s.Zones[0].IdleClamps == 0 {
		t.Error("clamps happened but none were counted")
	}
}

// A two-socket fixture: each socket's zones go to the work on its CPUs.
func TestRAPLFixtureTwoSockets(t *testing.T) {
	tree := newRAPLTree(t, 2, 262143328850)
	meter, err := power.NewRAPL(tree.root)
	if err != nil {
		t.Fatal(err)
	}
	src := &fakeSource{}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 0, "dram": 0},
		Sockets: map[int]int{0: 0, 1: 0, 2: 1, 3: 1}, CPUs: 4}, src, meter, names{1: "/s0", 2: "/s1", 3: "/both"})
	t0 := time.Unix(0, 0)
	src.add(1, 1, 0, 0)
	src.add(2, 2, 2, 0)
	src.add(3, 3, 1, 0)
	src.add(3, 4, 3, 0)
	l.Step(t0)
	src.add(1, 1, 1, 1e9) // socket 0
	src.add(2, 2, 2, 1e9) // socket 1
	src.add(3, 3, 1, 1e9) // socket 0
	src.add(3, 4, 3, 3e9) // socket 1
	tree.advance("intel-rapl:0", 60e6)
	tree.advance("intel-rapl:1", 80e6)
	tree.advance("intel-rapl:0:0", 10e6)
	tree.advance("intel-rapl:1:0", 20e6)
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	check := func(path, zone string, want float64) {
		t.Helper()
		if got := cgroupByPath(s, path).Energy.Get(zone).DynamicJ; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s %s: %v J, want %v", path, zone, got, want)
		}
	}
	// Socket 0: /s0 and /both ran 1 s each. Socket 1: /s1 1 s, /both 3 s.
	check("/s0", "package", 30)
	check("/s1", "package", 20)
	check("/both", "package", 30+60)
	check("/s0", "dram", 5)
	check("/s1", "dram", 5)
	check("/both", "dram", 5+15)
}
