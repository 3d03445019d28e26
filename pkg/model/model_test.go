package model

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// fsum is a Neumaier sum so that the tests measure Split's error, not their
// own summation error.
func fsum(xs ...float64) float64 {
	var s, c float64
	for _, x := range xs {
		t := s + x
		if math.Abs(s) >= math.Abs(x) {
			c += (s - t) + x
		} else {
			c += (x - t) + s
		}
		s = t
	}
	return s + c
}

func mapSum[K comparable](m map[K]float64) float64 {
	xs := make([]float64, 0, len(m))
	for _, v := range m {
		xs = append(xs, v)
	}
	return fsum(xs...)
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

func TestConfiguredIdleSplit(t *testing.T) {
	m, err := NewConfiguredIdle(10)
	if err != nil {
		t.Fatal(err)
	}
	const dt = 2e9 // 2 s
	if got := m.IdleJ(dt, 0, 0); got != 20 {
		t.Fatalf("10 W × 2 s = %v J, want exactly 20", got)
	}

	// Model below energy: exact idle, no clamp.
	dyn, idle := map[string]float64{}, map[string]float64{}
	r := Split(Interval[string]{EnergyJ: 50, IdleJ: m.IdleJ(dt, 50, 0), Usage: map[string]float64{"a": 1}, Policy: IdleNone}, dyn, idle)
	if r.IdleJ != 20 || r.DynamicJ != 30 || r.UnattributedJ != 0 || r.Clamped {
		t.Fatalf("got %+v, want idle 20 dynamic 30 unclamped", r)
	}
	if dyn["a"] != 30 || len(idle) != 0 {
		t.Fatalf("dyn %v idle %v, want a=30 and no idle attribution", dyn, idle)
	}

	// Model above energy: clamp to ΔE, nothing dynamic.
	dyn = map[string]float64{}
	r = Split(Interval[string]{EnergyJ: 15, IdleJ: m.IdleJ(dt, 15, 0), Usage: map[string]float64{"a": 1}}, dyn, nil)
	if r.IdleJ != 15 || r.DynamicJ != 0 || !r.Clamped {
		t.Fatalf("got %+v, want idle clamped to 15, dynamic 0, Clamped", r)
	}
	if len(dyn) != 0 {
		t.Fatalf("dyn %v, want no zero entries", dyn)
	}

	// Equal is not a clamp.
	r = Split(Interval[string]{EnergyJ: 20, IdleJ: 20}, nil, nil)
	if r.Clamped || r.IdleJ != 20 || r.DynamicJ != 0 || r.UnattributedJ != 0 {
		t.Fatalf("got %+v, want idle 20 unclamped", r)
	}
}

func TestNewConfiguredIdleErrors(t *testing.T) {
	for _, w := range []float64{-1, math.NaN(), math.Inf(1), math.Inf(-1)} {
		if _, err := NewConfiguredIdle(w); err == nil {
			t.Errorf("NewConfiguredIdle(%v): no error", w)
		}
	}
	if m, err := NewConfiguredIdle(0); err != nil || m.IdleJ(1e9, 5, 1) != 0 {
		t.Errorf("0 W: %v, %v", m, err)
	}
	if got := (ConfiguredIdle{Watts: 10}).IdleJ(-1e9, 5, 1); got != 0 {
		t.Errorf("negative dt: %v, want 0", got)
	}
}

func TestRatio(t *testing.T) {
	dyn := map[string]float64{}
	r := Split(Interval[string]{EnergyJ: 10, IdleJ: 1, Usage: map[string]float64{"A": 2, "B": 1}}, dyn, nil)
	if r.DynamicJ != 9 {
		t.Fatalf("dynamic %v, want 9", r.DynamicJ)
	}
	if e := relErr(dyn["A"], 2*dyn["B"]); e > 1e-12 {
		t.Errorf("A=%v B=%v: A/2B off by %g", dyn["A"], dyn["B"], e)
	}
	if e := relErr(dyn["A"], 9*2.0/3); e > 1e-12 {
		t.Errorf("A=%v, want 6", dyn["A"])
	}
	if e := relErr(dyn["B"], 9*1.0/3); e > 1e-12 {
		t.Errorf("B=%v, want 3", dyn["B"])
	}
}

func TestAddsIntoMaps(t *testing.T) {
	dyn := map[string]float64{"A": 100}
	idle := map[string]float64{"A": 7}
	Split(Interval[string]{EnergyJ: 10, IdleJ: 4, Usage: map[string]float64{"A": 1}, Policy: IdleShare}, dyn, idle)
	if dyn["A"] != 106 || idle["A"] != 11 {
		t.Fatalf("dyn %v idle %v, want A=106 and A=11 (added, not overwritten)", dyn, idle)
	}
}

func TestTwoSockets(t *testing.T) {
	dyn := map[string]float64{}
	idle := map[string]float64{}
	// Socket 0: 100 J, 20 J idle, a:b = 1:3 → a 20, b 60 dynamic.
	r0 := Split(Interval[string]{EnergyJ: 100, IdleJ: 20, Usage: map[string]float64{"a": 1, "b": 3}, Policy: IdleShare}, dyn, idle)
	// Socket 1: 60 J, 10 J idle, b:c = 1:1 → b 25, c 25 dynamic.
	r1 := Split(Interval[string]{EnergyJ: 60, IdleJ: 10, Usage: map[string]float64{"b": 1, "c": 1}, Policy: IdleShare}, dyn, idle)
	if r0.DynamicJ != 80 || r1.DynamicJ != 50 {
		t.Fatalf("results %+v %+v", r0, r1)
	}
	wantDyn := map[string]float64{"a": 20, "b": 85, "c": 25}
	wantIdle := map[string]float64{"a": 5, "b": 20, "c": 5}
	for k := range wantDyn {
		if dyn[k] != wantDyn[k] || idle[k] != wantIdle[k] {
			t.Errorf("%s: dynamic %v idle %v, want %v %v", k, dyn[k], idle[k], wantDyn[k], wantIdle[k])
		}
	}
	if len(dyn) != 3 || len(idle) != 3 {
		t.Errorf("unexpected keys: %v %v", dyn, idle)
	}
}

func TestIdlePolicies(t *testing.T) {
	usage := map[string]float64{"a": 3, "b": 1, "z": 0}
	cases := []struct {
		policy   IdlePolicy
		wantIdle map[string]float64
	}{
		{IdleNone, map[string]float64{}},
		{"", map[string]float64{}},      // zero value behaves as none
		{"bogus", map[string]float64{}}, // so does anything unknown
		{IdleEven, map[string]float64{"a": 4, "b": 4, "z": 4}},
		{IdleShare, map[string]float64{"a": 9, "b": 3}},
	}
	for _, c := range cases {
		t.Run(string(c.policy), func(t *testing.T) {
			dyn, idle := map[string]float64{}, map[string]float64{}
			r := Split(Interval[string]{EnergyJ: 20, IdleJ: 12, Usage: usage, Policy: c.policy}, dyn, idle)
			if r.IdleJ != 12 || r.DynamicJ != 8 || r.UnattributedJ != 0 || r.Clamped {
				t.Fatalf("result %+v", r)
			}
			if dyn["a"] != 6 || dyn["b"] != 2 || len(dyn) != 2 {
				t.Errorf("dynamic %v, want a=6 b=2 and no z", dyn)
			}
			if len(idle) != len(c.wantIdle) {
				t.Errorf("idle %v, want %v", idle, c.wantIdle)
			}
			for k, v := range c.wantIdle {
				if idle[k] != v {
					t.Errorf("idle[%s] = %v, want %v", k, idle[k], v)
				}
			}
		})
	}
}

func TestNoUsageIsUnattributed(t *testing.T) {
	for _, p := range []IdlePolicy{IdleNone, IdleEven, IdleShare} {
		t.Run(string(p), func(t *testing.T) {
			dyn, idle := map[string]float64{}, map[string]float64{}
			usage := map[string]float64{"a": 0, "b": -5, "c": math.NaN(), "d": 0}
			r := Split(Interval[string]{EnergyJ: 30, IdleJ: 10, Usage: usage, Policy: p}, dyn, idle)
			if r.IdleJ != 10 || r.DynamicJ != 20 || r.UnattributedJ != 20 {
				t.Fatalf("result %+v, want idle 10 dynamic 20 all unattributed", r)
			}
			if len(dyn) != 0 {
				t.Errorf("dynamic %v, want none", dyn)
			}
			// IdleShare falls back to even when nobody used anything.
			want := 0.0
			if p != IdleNone {
				want = 2.5
			}
			for _, k := range []string{"a", "b", "c", "d"} {
				if idle[k] != want {
					t.Errorf("idle[%s] = %v, want %v", k, idle[k], want)
				}
			}
		})
	}

	// No workloads at all: nothing attributed anywhere, and nil maps are fine.
	r := Split(Interval[int]{EnergyJ: 30, IdleJ: 10, Policy: IdleEven}, nil, nil)
	if r.UnattributedJ != 20 || r.IdleJ != 10 {
		t.Fatalf("no workloads: %+v", r)
	}
}

func TestBadInputs(t *testing.T) {
	for _, e := range []float64{-5, math.NaN(), math.Inf(1)} {
		dyn := map[string]float64{}
		r := Split(Interval[string]{EnergyJ: e, IdleJ: 3, Usage: map[string]float64{"a": 1}}, dyn, nil)
		if r.IdleJ != 0 || r.DynamicJ != 0 || r.UnattributedJ != 0 || !r.Clamped || len(dyn) != 0 {
			t.Errorf("EnergyJ %v: %+v %v, want everything 0, idle clamped", e, r, dyn)
		}
	}
	for _, i := range []float64{-3, math.NaN()} {
		r := Split(Interval[string]{EnergyJ: 10, IdleJ: i}, nil, nil)
		if r.IdleJ != 0 || r.DynamicJ != 10 || r.Clamped {
			t.Errorf("IdleJ %v: %+v, want idle 0", i, r)
		}
	}
	dyn := map[string]float64{}
	Split(Interval[string]{EnergyJ: 10, Usage: map[string]float64{"a": 1, "neg": -1, "nan": math.NaN(), "inf": math.Inf(1)}}, dyn, nil)
	if dyn["a"] != 10 || len(dyn) != 1 {
		t.Errorf("bad usage must count as 0: %v", dyn)
	}
}

// TestCompensatedTotal uses a usage set where plain summation of the total
// loses every small usage (1e16 + 1 rounds back to 1e16), so Σ shares would
// overshoot DynamicJ by ~1e-12 relative. The compensated total keeps the
// error at a few ulps.
func TestCompensatedTotal(t *testing.T) {
	usage := map[int]float64{0: 1e16}
	for i := 1; i <= 10000; i++ {
		usage[i] = 1
	}
	dyn := map[int]float64{}
	r := Split(Interval[int]{EnergyJ: 100, Usage: usage}, dyn, nil)
	if e := relErr(mapSum(dyn), r.DynamicJ); e > 1e-14 {
		t.Fatalf("Σ shares off by %g relative, want ≤ 1e-14", e)
	}
}

func TestConservation(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	policies := []IdlePolicy{IdleNone, IdleEven, IdleShare}

	total := map[int]float64{} // per-workload dynamic, across intervals
	totalIdleAttr := map[int]float64{}
	var sumE, sumIdle, sumUnattr []float64
	var worst float64
	dyn, idle := map[int]float64{}, map[int]float64{}

	for iv := range 100 {
		n := 1 + rng.IntN(2000)
		usage := make(map[int]float64, n)
		for range n {
			// Workload ids from a pool so they recur across intervals,
			// like long-lived cgroups.
			k := rng.IntN(5000)
			switch rng.IntN(20) {
			case 0:
				usage[k] = 0
			default:
				usage[k] = math.Pow(10, -3+12*rng.Float64()) // 1e-3 .. 1e9
			}
		}
		if iv == 7 { // an interval where nobody ran
			for k := range usage {
				usage[k] = 0
			}
		}
		in := Interval[int]{
			EnergyJ: 500 * rng.Float64(),
			IdleJ:   600 * rng.Float64(), // sometimes above EnergyJ: clamps
			Usage:   usage,
			Policy:  policies[iv%3],
		}
		clear(dyn)
		clear(idle)
		r := Split(in, dyn, idle)

		if r.IdleJ+r.DynamicJ != in.EnergyJ && relErr(r.IdleJ+r.DynamicJ, in.EnergyJ) > 1e-15 {
			t.Fatalf("interval %d: idle+dynamic = %v, energy %v", iv, r.IdleJ+r.DynamicJ, in.EnergyJ)
		}
		parts := fsum(mapSum(dyn), r.UnattributedJ, r.IdleJ)
		e := relErr(parts, in.EnergyJ)
		worst = max(worst, e)
		if e > 1e-9 {
			t.Fatalf("interval %d (%d workloads, %s): parts %v, energy %v, rel err %g", iv, len(usage), in.Policy, parts, in.EnergyJ, e)
		}
		if in.Policy != IdleNone {
			if e := relErr(mapSum(idle), r.IdleJ); e > 1e-12 {
				t.Fatalf("interval %d: Σ attributed idle %v, node idle %v", iv, mapSum(idle), r.IdleJ)
			}
		} else if len(idle) != 0 {
			t.Fatalf("interval %d: idle attributed under none", iv)
		}
		if iv == 7 && (r.UnattributedJ != r.DynamicJ || len(dyn) != 0) {
			t.Fatalf("interval 7: %+v, %d workloads got dynamic energy", r, len(dyn))
		}

		// Accumulate the way the stats loop does: plain += into
		// long-lived per-workload counters.
		for k, v := range dyn {
			total[k] += v
		}
		for k, v := range idle {
			totalIdleAttr[k] += v
		}
		sumE = append(sumE, in.EnergyJ)
		sumIdle = append(sumIdle, r.IdleJ)
		sumUnattr = append(sumUnattr, r.UnattributedJ)
	}

	E := fsum(sumE...)
	parts := fsum(mapSum(total), fsum(sumUnattr...), fsum(sumIdle...))
	cum := relErr(parts, E)
	if cum > 1e-9 {
		t.Fatalf("cumulative: parts %v, energy %v, rel err %g", parts, E, cum)
	}
	t.Logf("worst interval rel err %.3g, cumulative rel err %.3g over %.1f J", worst, cum, E)
	// Tighter than the acceptance bound, to catch a regression to an
	// uncompensated total or per-share rounding long before it matters.
	if worst > 1e-14 || cum > 1e-14 {
		t.Errorf("error larger than a few ulps: worst %g cumulative %g", worst, cum)
	}
}

func TestParseIdlePolicy(t *testing.T) {
	for s, want := range map[string]IdlePolicy{"none": IdleNone, "even": IdleEven, "cpu": IdleShare} {
		got, err := ParseIdlePolicy(s)
		if err != nil || got != want {
			t.Errorf("ParseIdlePolicy(%q) = %q, %v", s, got, err)
		}
	}
	for _, s := range []string{"", "CPU", "share", " none", "idle"} {
		got, err := ParseIdlePolicy(s)
		if err == nil {
			t.Errorf("ParseIdlePolicy(%q) = %q, want error", s, got)
			continue
		}
		msg := err.Error()
		for _, want := range []string{fmt.Sprintf("%q", s), `"none"`, `"even"`, `"cpu"`} {
			if !strings.Contains(msg, want) {
				t.Errorf("ParseIdlePolicy(%q) error %q does not mention %s", s, msg, want)
			}
		}
	}
}

func BenchmarkSplit(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("workloads=%d", n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			usage := make(map[uint64]float64, n)
			for i := range n {
				usage[uint64(i)] = math.Pow(10, -3+12*rng.Float64())
			}
			in := Interval[uint64]{EnergyJ: 250, IdleJ: 40, Usage: usage, Policy: IdleShare}
			dyn := make(map[uint64]float64, n)
			idle := make(map[uint64]float64, n)
			b.ReportAllocs()
			for b.Loop() {
				// Reused maps, as the stats loop keeps them: after the
				// first interval every key exists and Split allocates
				// nothing.
				Split(in, dyn, idle)
			}
		})
	}
}

func ExampleSplit() {
	dyn, idle := map[string]float64{}, map[string]float64{}
	r := Split(Interval[string]{
		EnergyJ: 100, // J used by the zone this interval
		IdleJ:   40,  // J the idle model says it would use anyway
		Usage:   map[string]float64{"web": 3, "db": 1},
		Policy:  IdleEven,
	}, dyn, idle)
	fmt.Println(r.IdleJ, r.DynamicJ, r.UnattributedJ)
	fmt.Println(dyn["web"], dyn["db"], idle["web"], idle["db"])
	// Output:
	// 40 60 0
	// 45 15 20 20
}
