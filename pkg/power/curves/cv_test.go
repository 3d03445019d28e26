package curves

import (
	"encoding/json"
	"fmt"
	"math"
	"testing"
)

func TestFamilyAndSKU(t *testing.T) {
	for key, want := range map[string]struct {
		family string
		sku    float64
	}{
		"xeon e5-2680 v3":    {"xeon e5-26xx v3", 0.30},
		"xeon gold 6248":     {"xeon gold 62xx", -0.02},
		"xeon platinum 8180": {"xeon platinum 81xx", 0.30},
		"xeon x5670":         {"xeon x56xx", 0.20},
		"xeon e3-1260l v5":   {"xeon e3-12xxl v5", 0.10},
		"epyc 7742":          {"epyc 7xx2", 0.24},
		"opteron 6376":       {"opteron 63xx", 0.26},
		"core i3-540":        {"", 0},
		"xeon":               {"", 0},
		"":                   {"", 0},
	} {
		if got := Family(key); got != want.family {
			t.Errorf("Family(%q) = %q, want %q", key, got, want.family)
		}
		if got := skuRank(key); math.Abs(got-want.sku) > 1e-9 {
			t.Errorf("skuRank(%q) = %v, want %v", key, got, want.sku)
		}
	}
	for key, want := range map[string]float64{"xeon e3-1240 v2": 1, "xeon e-2278g": 1, "xeon x3470": 1, "xeon e5-2680 v3": 0, "xeon gold 6248": 0} {
		if got := feature("entry", inputs{key: key}); got != want {
			t.Errorf("entry(%q) = %v, want %v", key, got, want)
		}
	}
}

// The whole procedure, cross-validated on synthetic servers that follow a
// known law, scores close to the noise it was given; CPUs only one fold
// knows land in the arch tier and are scored there.
func TestCrossValidate(t *testing.T) {
	rs := synthetic(150, 0.05, 7)
	rep, err := CrossValidate(rs, DefaultOptions, 5)
	if err != nil {
		t.Fatal(err)
	}
	if rep.All.Cases != 150*NumLevels {
		t.Errorf("%d cases, want %d", rep.All.Cases, 150*NumLevels)
	}
	// |N(0, 0.05)|: median 0.034, p90 0.082; the law is not quite
	// log-linear, so allow some room.
	if rep.All.MedianAbs > 0.06 || rep.All.P90Abs > 0.14 {
		t.Errorf("median %.3f, p90 %.3f; want <= 0.06, 0.14", rep.All.MedianAbs, rep.All.P90Abs)
	}
	if rep.All.InBand < 0.75 {
		t.Errorf("in band %.3f, want >= 0.75", rep.All.InBand)
	}
	if _, ok := rep.ByTier[TierCPU]; !ok || len(rep.Worst) == 0 {
		t.Errorf("no cpu tier or no worst list: %+v", rep)
	}
	for l, a := range rep.ByLevel {
		if a.Cases != 150 || !(a.P90Abs >= a.MedianAbs) {
			t.Errorf("level %v: %+v", Levels[l], a)
		}
	}
	if _, err := CrossValidate(rs, DefaultOptions, 1); err == nil {
		t.Error("1 fold accepted")
	}
}

// With CPUWeight the fallback tiers weigh each CPU once: a CPU measured
// thirty times at 100 W and one measured four times at 200 W give an
// unseen CPU their geometric middle, 141 W, not 108 W.
func TestCPUWeight(t *testing.T) {
	var rs []Result
	for i := 0; i < 34; i++ {
		th := 1 + i%2 // half of each CPU's results on 1, half on 2 threads
		r := Result{ID: fmt.Sprint("w", i), CPU: "Foo A", TDP: 50, Sockets: 1, Threads: th, MemoryGiB: float64(th)}
		w := 100.0
		if i >= 30 {
			r.CPU, w = "Foo B", 200
		}
		for l := range r.Watts {
			r.Watts[l] = w
		}
		rs = append(rs, r)
	}
	for weigh, want := range map[bool]float64{true: math.Sqrt(100 * 200), false: 100 * math.Pow(2, 4.0/34)} {
		opt := DefaultOptions
		opt.Huber, opt.CPUWeight = false, weigh
		f, err := Train(rs, opt)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := New(b, archsJSON)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.Server(Node{CPU: "Foo C", Sockets: 1, Threads: 1, MemoryGiB: 1})
		if err != nil {
			t.Fatal(err)
		}
		if got := c.Points[NumLevels-1].Watts; c.Info.Tier != TierGeneric || math.Abs(got/want-1) > 0.01 {
			t.Errorf("CPUWeight %v: %s tier %.1f W, want generic %.1f W", weigh, c.Info.Tier, got, want)
		}
	}
	if got := offsetKey(TierArch, inputs{key: "xeon e5-2680 v3"}); got != "xeon e5-26xx v3" {
		t.Errorf("arch tier offsets keyed by %q, want the family", got)
	}
	if got := offsetKey(TierCPU, inputs{key: "xeon e5-2680 v3"}); got != "xeon e5-2680 v3" {
		t.Errorf("cpu tier offsets keyed by %q, want the CPU", got)
	}
}
