package carbon

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// stepper is a provider whose factor steps at known times: steps[i]
// applies from start + i×every. It dates its samples, like RTE.
type stepper struct {
	now   func() time.Time
	start time.Time
	every time.Duration
	steps []float64
}

func (s *stepper) Name() string { return "rte" }
func (s *stepper) Zone() string { return "FR" }
func (s *stepper) at(t time.Time) (float64, time.Time) {
	i := int(t.Sub(s.start) / s.every)
	return s.steps[i%len(s.steps)], s.start.Add(time.Duration(i) * s.every)
}
func (s *stepper) Fetch(context.Context) (Sample, error) {
	g, at := s.at(s.now())
	return Sample{GramsPerKWh: g, At: at}, nil
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

// Integration exactness: with a factor that changes at known times, read
// through a provider and the chain as the stats loop will, every
// workload's grams equal Σ over intervals of its ΔE × factor(t), and
// Σ workloads + idle = node grams, to 1e-9 relative.
func TestLedgerExactWithChangingFactor(t *testing.T) {
	start := time.Date(2024, 5, 14, 0, 0, 0, 0, time.UTC)
	clk := newClock(start)
	st := &stepper{now: clk.Now, start: start, every: 15 * time.Minute,
		steps: []float64{52, 48, 61, 75, 33, 29, 90, 120, 18, 44, 67, 58}}
	p := NewProvider(st, ProviderOptions{Now: clk.Now})
	ch := NewChain(time.Hour, p, NewProvider(Constant{GramsPerKWh: 436}, ProviderOptions{Now: clk.Now}))
	led := NewLedger[string]()
	r := rand.New(rand.NewPCG(12, 34))
	const interval = 3 * time.Second
	want := map[string]float64{}
	ctx := context.Background()
	steps := int(3 * time.Hour / interval)
	for i := 0; i < steps; i++ {
		// The provider is refreshed every minute in the background; the
		// stats loop takes the factor in force at the end of each
		// interval. The step boundaries fall on minutes, so no interval
		// straddles one.
		if i%20 == 0 {
			if err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		f, ok := ch.Factor()
		g, _ := st.at(clk.Now())
		if !ok || f.Provider != "rte" || f.GramsPerKWh != g {
			t.Fatalf("step %d: factor %+v, in force %g", i, f, g)
		}
		// Energies that conserve: node = Σ workloads + idle, as the
		// stats stage guarantees for joules.
		w := map[string]float64{
			"job/1": r.Float64() * 300, "job/2": r.Float64() * 150,
			"pod/a": r.Float64() * r.Float64() * 400, "idle": 60 + r.Float64()*10,
		}
		node := 0.0
		for _, k := range []string{"job/1", "job/2", "pod/a", "idle"} {
			if _, err := led.Credit(k, w[k], f); err != nil {
				t.Fatal(err)
			}
			want[k] += w[k] * g / 3.6e6
			node += w[k]
		}
		if _, err := led.Credit("node", node, f); err != nil {
			t.Fatal(err)
		}
		want["node"] += node * g / 3.6e6
		clk.Advance(interval)
	}
	sum := 0.0
	for _, k := range []string{"job/1", "job/2", "pod/a", "idle"} {
		got := led.Grams(k, "rte")
		if e := relErr(got, want[k]); e > 1e-9 {
			t.Errorf("%s: %.12g g, want %.12g (rel %g)", k, got, want[k], e)
		}
		sum += got
	}
	if e := relErr(sum, led.Grams("node", "rte")); e > 1e-9 {
		t.Errorf("Σ workloads + idle = %.12g g, node %.12g g (rel %g)", sum, led.Grams("node", "rte"), e)
	}
	if e := relErr(led.Grams("node", "rte"), want["node"]); e > 1e-9 {
		t.Errorf("node %.12g, want %.12g", led.Grams("node", "rte"), want["node"])
	}
	// The factor really changed: a constant average would not do.
	if led.Grams("node", "rte") <= 0 || led.Len() != 5 {
		t.Fatalf("ledger %d series", led.Len())
	}
}

// When the chain falls back, the grams go to the fallback's series: the
// provider label says which factor each gram was computed with.
func TestLedgerSplitsByProvider(t *testing.T) {
	led := NewLedger[string]()
	rte := Factor{Provider: "rte", GramsPerKWh: 50}
	cst := Factor{Provider: "constant", GramsPerKWh: 436, Fallback: true}
	_, _ = led.Credit("job/1", 3.6e6, rte) // 1 kWh at 50
	_, _ = led.Credit("job/1", 7.2e6, cst) // 2 kWh at 436
	if led.Grams("job/1", "rte") != 50 || led.Grams("job/1", "constant") != 872 || led.Total("job/1") != 922 {
		t.Fatalf("rte %g constant %g total %g", led.Grams("job/1", "rte"), led.Grams("job/1", "constant"), led.Total("job/1"))
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if g, err := led.Credit("job/1", bad, rte); err == nil || g != 0 {
			t.Errorf("%g J credited", bad)
		}
	}
	if led.Total("job/1") != 922 {
		t.Fatal("a refused credit changed the total")
	}
	n := 0
	led.Each(func(string, string, float64) { n++ })
	led.Forget("job/1")
	if n != 2 || led.Len() != 0 {
		t.Fatalf("each %d, len after forget %d", n, led.Len())
	}
}

// Compensated sums: a billion tiny credits on top of a large total lose
// nothing a plain float sum would.
func TestLedgerNoDrift(t *testing.T) {
	led := NewLedger[int]()
	f := Factor{Provider: "constant", GramsPerKWh: 3.6e6} // 1 g per J
	_, _ = led.Credit(0, 1e12, f)
	for i := 0; i < 1_000_000; i++ {
		_, _ = led.Credit(0, 1e-4, f)
	}
	if got, want := led.Grams(0, "constant"), 1e12+100; relErr(got, want) > 1e-15 {
		t.Fatalf("%.6f, want %.6f", got, want)
	}
}

// A NaN cannot travel in JSON, so the network tests cannot send one: a
// fetcher that returns it must be rejected the same way.
func TestProviderRejectsNaN(t *testing.T) {
	p := NewProvider(Constant{GramsPerKWh: math.NaN()}, ProviderOptions{})
	if err := p.Poll(context.Background()); err == nil {
		t.Fatal("NaN accepted")
	}
	if h := p.Health(); h.Rejected["non_finite"] != 1 || h.Up {
		t.Fatalf("health %+v", h)
	}
	if _, ok := p.Current(); ok {
		t.Fatal("NaN cached")
	}
}
