package curves

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz":                              "xeon platinum 8180",
		"Intel Xeon Platinum 8180 2.50 GHz":                                         "xeon platinum 8180",
		"Intel Xeon Platinum 8180 @2.50 GHz":                                        "xeon platinum 8180",
		"Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz":                                  "xeon e5-2670",
		"Intel Xeon E5-2660 2.20 GHz (Intel Turbo Boost Technology up to 3.00 GHz)": "xeon e5-2660",
		"Intel Xeon E5-2660V2":                                                      "xeon e5-2660 v2",
		"Intel(R) Xeon(R) CPU E5-2660 v2 @ 2.20GHz":                                 "xeon e5-2660 v2",
		"Intel Xeon E3-1265LV3":                                                     "xeon e3-1265l v3",
		"AMD EPYC 7742 64-Core Processor":                                           "epyc 7742",
		"AMD EPYC 7742 2.25Ghz":                                                     "epyc 7742",
		"AMD EPYC 7601 2.20 GHz, Dell SKU [338-BNCG]":                               "epyc 7601",
		"Quad-Core AMD Opteron(r) Processor 8381 HE":                                "opteron 8381he",
		"AMD Opteron 4164 EE":                                                       "opteron 4164ee",
		"2.6 GHz AMD Opteron 2435":                                                  "opteron 2435",
		"Intel Xeon  L5335":                                                         "xeon l5335",
		"":                                                                          "",
		"ARM implementer 0x41 part 0xd0c":                                           "arm implementer 0x41 part 0xd0c",
		"Intel Xeon Gold 6314U CPU @ 2.30GHz (Intel Turbo Boost Technology up to 3.4": "xeon gold 6314u",
	} {
		if got := Normalize(in); got != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// The architecture table recognises what /proc/cpuinfo prints on the
// clouds and servers the old coefficient table knew, with CCF's figures.
func TestArchLookup(t *testing.T) {
	tab, err := parseArchs(archsJSON)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		model    string
		arch     string
		min, max float64
	}{
		{"Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", "Cascade Lake", 0.69, 4.06},
		{"AMD EPYC 7B13 64-Core Processor", "EPYC 3rd Gen", 0.46, 1.96},
		{"Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", "Skylake", 0.61, 4.10},
		{"Intel(R) Xeon(R) Gold 6148 CPU @ 2.40GHz", "Skylake", 0.61, 4.10},
		{"Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz", "Ice Lake", 0.77, 3.76},
		{"Intel Xeon Platinum 8380HL", "Cooper Lake", 0.77, 3.76},
		{"Intel(R) Xeon(R) Platinum 8488C", "Sapphire Rapids", 1.04, 4.16},
		{"INTEL(R) XEON(R) PLATINUM 8559C", "Emerald Rapids", 0.81, 4.48},
		{"Intel(R) Xeon(R) 6975P-C", "Granite Rapids", 0.58, 2.53},
		{"Intel(R) Xeon(R) E-2278G CPU @ 3.40GHz", "Coffee Lake", 1.14, 5.42},
		{"Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Broadwell", 0.71, 3.69},
		{"Intel(R) Xeon(R) CPU E5-2676 v3 @ 2.40GHz", "Haswell", 1.86, 5.60},
		{"Intel(R) Xeon(R) CPU E5-2680 v2 @ 2.80GHz", "Ivy Bridge", 1.71, 5.56},
		{"Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz", "Sandy Bridge", 2.21, 8.63},
		{"AMD EPYC 9654 96-Core Processor", "EPYC 4th Gen", 0.74, 2.28},
		{"ARM implementer 0x41 part 0xd0c", "Graviton2", 0.47, 1.69},
		{"Intel Xeon X5670", "Nehalem", 0, 0},
		{"Intel Xeon L5430", "Core", 0, 0},
		{"AMD Opteron 6276", "Opteron", 0, 0},
		{"Intel Xeon E-2388G", "Rocket Lake", 0, 0},
	} {
		a, ok := tab.lookupArch(Normalize(tc.model))
		if !ok || a.Name != tc.arch || a.MinW != tc.min || a.MaxW != tc.max {
			t.Errorf("%q: %q %v/%v (found %v), want %q %v/%v", tc.model, a.Name, a.MinW, a.MaxW, ok, tc.arch, tc.min, tc.max)
		}
	}
	for _, m := range []string{"Intel(R) Xeon(R) CPU @ 2.20GHz", "AMD EPYC", "QEMU Virtual CPU version 2.5+", ""} {
		if a, ok := tab.lookupArch(Normalize(m)); ok {
			t.Errorf("%q matched %q; a masked model must fall back", m, a.Name)
		}
	}
	if tab.Average.MinW != 0.74 || tab.Average.MaxW != 3.5 {
		t.Errorf("average = %v/%v, want CCF's AWS 0.74/3.5", tab.Average.MinW, tab.Average.MaxW)
	}
	if !strings.Contains(strings.Join(tab.Notes, " "), "b0032d928c787cf76cecd7d1d611c5b46f366e29") {
		t.Error("archs.json does not cite the ccf-coefficients commit")
	}
}

func TestParseArchsRejects(t *testing.T) {
	for want, js := range map[string]string{
		"parse archs.json":     `{`,
		"average row":          `{"average": {"min_watts_per_vcpu": 0, "max_watts_per_vcpu": 0}}`,
		"want 0 <= min <= max": `{"average": {"min_watts_per_vcpu": 2, "max_watts_per_vcpu": 1}}`,
		"needs arch":           `{"average": {"min_watts_per_vcpu": 1, "max_watts_per_vcpu": 2}, "architectures": [{"arch": "x"}]}`,
		"pattern":              `{"average": {"min_watts_per_vcpu": 1, "max_watts_per_vcpu": 2}, "architectures": [{"arch": "x", "specpower": "x", "match": ["("]}]}`,
		`row "x": watts`:       `{"average": {"min_watts_per_vcpu": 1, "max_watts_per_vcpu": 2}, "architectures": [{"arch": "x", "specpower": "x", "match": ["a"], "min_watts_per_vcpu": 1, "max_watts_per_vcpu": 1e9}]}`,
	} {
		if _, err := parseArchs([]byte(js)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want %q", js, err, want)
		}
	}
}

func TestHeldOutIsStableAndAboutAFifth(t *testing.T) {
	// Fixed ids: the split must not change between machines or releases
	// (FNV-1a of the id mod 5).
	for id, want := range map[string]bool{"708562577034": false, "474746051946": false, "5": false, "6": true, "7": false, "8": true} {
		if HeldOut(id) != want {
			t.Errorf("HeldOut(%q) = %v, want %v", id, !want, want)
		}
	}
	n := 0
	for i := 0; i < 10000; i++ {
		if HeldOut(fmt.Sprint(i)) {
			n++
		}
	}
	if n < 1800 || n > 2200 {
		t.Errorf("%d of 10000 held out, want about 2000", n)
	}
}

// synthetic draws servers whose wall power follows a known law, with
// log-normal noise of the given sigma.
func synthetic(n int, sigma float64, seed uint64) []Result {
	rng := rand.New(rand.NewPCG(seed, 1))
	cpus := []struct {
		name string
		tdp  float64
	}{{"Intel Xeon Gold 6248", 150}, {"Intel Xeon Platinum 8180", 205}, {"AMD EPYC 7742", 225}, {"Intel Xeon E5-2660", 95}, {"Intel Xeon X5670", 95}}
	out := make([]Result, n)
	for i := range out {
		c := cpus[i%len(cpus)]
		sockets := 1 + i%2
		threads := sockets * (8 << (i % 3))
		mem := float64(int(16) << (i % 4))
		r := Result{ID: fmt.Sprint("syn", i), CPU: c.name, TDP: c.tdp, Sockets: sockets, Threads: threads, MemoryGiB: mem}
		noise := rng.NormFloat64() * sigma
		for l := range r.Watts {
			// 100 W per socket-TDP-unit at full load, 30% of it at idle,
			// plus 0.2 W per GiB: a law in TDP and memory only.
			full := 1.2*c.tdp*float64(sockets) + 0.2*mem
			r.Watts[l] = full * (0.3 + 0.7*Levels[l]/100) * math.Exp(noise)
		}
		out[i] = r
	}
	return out
}

// Train on synthetic servers: the cpu tier predicts noiseless servers
// closely, and the band's quantiles match the noise it was given.
func TestTrainRecoversLawAndBand(t *testing.T) {
	const sigma = 0.1
	train := synthetic(400, sigma, 1)
	f, err := Train(train, DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	archs, _ := json.Marshal(json.RawMessage(archsJSON))
	b, _ := json.Marshal(f)
	m, err := New(b, archs)
	if err != nil {
		t.Fatal(err)
	}
	clean := synthetic(50, 0, 2)
	acc, err := Score(clean, func(r Result, l int) (Estimate, error) {
		c, err := m.Server(Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB})
		if c.Info.Tier != TierCPU {
			t.Fatalf("%s: tier %s, want cpu", r.CPU, c.Info.Tier)
		}
		return c.Points[l], err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The law is not log-linear in the features (TDP and memory add), so
	// the fit is close, not exact.
	if acc.MedianAbs > 0.05 || acc.P90Abs > 0.12 {
		t.Errorf("noiseless servers: median %.3f, p90 %.3f; want <= 0.05, 0.12", acc.MedianAbs, acc.P90Abs)
	}
	tier := f.Tiers[0]
	// 5% and 95% quantiles of N(0, 0.1) are ∓0.164.
	for l := range tier.Low {
		if math.Abs(tier.Low[l]+0.164) > 0.06 || math.Abs(tier.High[l]-0.164) > 0.06 {
			t.Errorf("level %v: band [%.3f, %.3f], want about ∓0.164", Levels[l], tier.Low[l], tier.High[l])
		}
	}
	// The band holds about 90% of fresh noisy servers.
	fresh := synthetic(300, sigma, 3)
	acc, err = Score(fresh, func(r Result, l int) (Estimate, error) {
		c, err := m.Server(Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB})
		return c.Points[l], err
	})
	if err != nil {
		t.Fatal(err)
	}
	if acc.InBand < 0.8 || acc.InBand > 0.97 {
		t.Errorf("band holds %.3f of fresh servers, want about 0.9", acc.InBand)
	}
	// The median shape is the law's: 0.3 + 0.7 × load.
	for l, r := range f.Shape {
		if want := 0.3 + 0.7*Levels[l]/100; math.Abs(r-want) > 1e-9 {
			t.Errorf("shape at %v%% = %v, want %v", Levels[l], r, want)
		}
	}
}

func TestTrainRejects(t *testing.T) {
	if _, err := Train(synthetic(10, 0.1, 1), DefaultOptions); err == nil || !strings.Contains(err.Error(), "too few") {
		t.Errorf("10 results: %v", err)
	}
	bad := synthetic(40, 0.1, 1)
	bad[3].Watts[4] = math.NaN()
	if _, err := Train(bad, DefaultOptions); err == nil || !strings.Contains(err.Error(), "result syn3") {
		t.Errorf("NaN watts: %v", err)
	}
	o := DefaultOptions
	o.Quantiles = [2]float64{0.9, 0.1}
	if _, err := Train(synthetic(40, 0.1, 1), o); err == nil || !strings.Contains(err.Error(), "bad options") {
		t.Errorf("inverted quantiles: %v", err)
	}
}

func TestScore(t *testing.T) {
	rs := []Result{{ID: "a"}}
	for l := range rs[0].Watts {
		rs[0].Watts[l] = 100
	}
	// Predict 110 W everywhere with a band [105, 115] that misses 100 W.
	a, err := Score(rs, func(Result, int) (Estimate, error) { return Estimate{Watts: 110, Lower: 105, Upper: 115}, nil })
	if err != nil {
		t.Fatal(err)
	}
	if a.Cases != NumLevels || math.Abs(a.MedianAbs-0.1) > 1e-12 || math.Abs(a.Bias-0.1) > 1e-12 || a.InBand != 0 {
		t.Errorf("%+v", a)
	}
	a, _ = Score(rs, func(Result, int) (Estimate, error) { return Estimate{Watts: 90}, nil })
	if !math.IsNaN(a.InBand) || math.Abs(a.Bias+0.1) > 1e-12 {
		t.Errorf("no band: %+v", a)
	}
}

// The built-in model loads, is concave like SPECpower's median server,
// and its figures follow its inputs.
func TestDefaultModel(t *testing.T) {
	m, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	f := m.Fit()
	if !strings.Contains(f.Source, "SPECpower_ssj2008") || !strings.Contains(f.Source, "spec-power-model") || !strings.Contains(f.License, "AGPL-3.0") || f.Split != SplitRule {
		t.Errorf("provenance: %q / %q / %q", f.Source, f.License, f.Split)
	}
	if f.Fitted < 300 || f.HeldOut < 50 {
		t.Errorf("fitted %d, held out %d", f.Fitted, f.HeldOut)
	}
	// Concave: the median server at 30% load draws more than the straight
	// line from idle to full load would give.
	if lin := f.Shape[0] + 0.3*(1-f.Shape[0]); f.Shape[3] <= lin {
		t.Errorf("shape %v not concave at 30%%", f.Shape)
	}
	n := Node{CPU: "Intel Xeon Gold 6248", Sockets: 2, Threads: 80, MemoryGiB: 384}
	big, err := m.Server(n)
	if err != nil {
		t.Fatal(err)
	}
	n.MemoryGiB = 32
	small, _ := m.Server(n)
	if small.Points[10].Watts >= big.Points[10].Watts {
		t.Errorf("32 GiB server %v W >= 384 GiB one %v W", small.Points[10].Watts, big.Points[10].Watts)
	}
	for l := 1; l < NumLevels; l++ {
		if big.Points[l].Watts < big.Points[l-1].Watts {
			t.Errorf("server curve falls at %v%%", Levels[l])
		}
	}
	if _, err := m.Server(Node{CPU: "x", Sockets: 2, Threads: 1}); err == nil {
		t.Error("1 thread on 2 sockets accepted")
	}
}

func TestCurveAt(t *testing.T) {
	var c Curve
	for l := range c.Points {
		c.Points[l] = Estimate{Watts: float64(l * l), Lower: float64(l*l) - 1, Upper: float64(l*l) + 1}
	}
	for _, tc := range []struct{ load, want float64 }{{0, 0}, {0.25, 6.5}, {1, 100}, {2, 100}, {-1, 0}, {math.NaN(), 0}, {0.95, 90.5}} {
		if got := c.At(tc.load); got.Watts != tc.want || got.Lower != tc.want-1 || got.Upper != tc.want+1 {
			t.Errorf("At(%v) = %+v, want %v ± 1", tc.load, got, tc.want)
		}
	}
}

func TestPackageAndCap(t *testing.T) {
	m, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	n := Node{CPU: "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", Sockets: 2, Threads: 112, MemoryGiB: 192}
	p, err := m.Package(n)
	if err != nil {
		t.Fatal(err)
	}
	// 2 × 205 W TDP × Teads' 0.12 / 0.32 / 0.75 / 1.02.
	for l, want := range map[int]float64{0: 49.2, 1: 131.2, 5: 307.5, 10: 418.2} {
		if math.Abs(p.Points[l].Watts-want) > 1e-9 {
			t.Errorf("package at %v%% = %v W, want %v", Levels[l], p.Points[l].Watts, want)
		}
	}
	s, _ := m.Server(n)
	c := CapAt(p, s)
	for l := range c.Points {
		if c.Points[l].Watts > s.Points[l].Watts || c.Points[l].Watts != math.Min(p.Points[l].Watts, s.Points[l].Watts) {
			t.Errorf("capped at %v%%: %v, server %v, package %v", Levels[l], c.Points[l].Watts, s.Points[l].Watts, p.Points[l].Watts)
		}
	}
	if p.Points[5].Watts > s.Points[5].Watts && !strings.Contains(strings.Join(c.Info.Fallbacks, ";"), "capped") {
		t.Error("cap not noted")
	}
}

// A node matches a measured configuration with the same CPU, sockets and
// threads and memory within 10% (MemTotal 187.6 GiB of 192 installed), and
// only when it gave its memory.
func TestConfigOffsetMatch(t *testing.T) {
	tr := Tier{Configs: []ConfigOffset{
		{CPU: "xeon platinum 8180", Sockets: 2, Threads: 112, MemoryGiB: 192},
		{CPU: "xeon platinum 8180", Sockets: 2, Threads: 112, MemoryGiB: 384},
	}}
	in := inputs{key: "xeon platinum 8180", sockets: 2, threads: 112, memG: 187.6, memGiven: true}
	if c := tr.config(in); c == nil || c.MemoryGiB != 192 {
		t.Errorf("187.6 GiB matched %+v, want the 192 GiB configuration", c)
	}
	in.memG = 360
	if c := tr.config(in); c == nil || c.MemoryGiB != 384 {
		t.Errorf("360 GiB matched %+v, want 384", c)
	}
	in.memG = 256
	if c := tr.config(in); c != nil {
		t.Errorf("256 GiB matched %+v, want none", c)
	}
	in.memG, in.memGiven = 192, false
	if c := tr.config(in); c != nil {
		t.Errorf("imputed memory matched %+v", c)
	}
	in.memGiven, in.threads = true, 56
	if c := tr.config(in); c != nil {
		t.Errorf("56 threads matched %+v", c)
	}
}

// A damaged fit.json is refused with what is wrong in it.
func TestNewRejectsBadFit(t *testing.T) {
	good := func() map[string]any {
		var f map[string]any
		if err := json.Unmarshal(fitJSON, &f); err != nil {
			t.Fatal(err)
		}
		return f
	}
	tier0 := func(f map[string]any) map[string]any { return f["tiers"].([]any)[0].(map[string]any) }
	for want, damage := range map[string]func(f map[string]any){
		"coefficients for": func(f map[string]any) { tier0(f)["coef"].([]any)[3] = []any{1.0} },
		"must hold 0":      func(f map[string]any) { tier0(f)["band_low"].([]any)[2] = 0.3 },
		`no tier "generic"`: func(f map[string]any) {
			f["tiers"] = f["tiers"].([]any)[:2]
		},
		"want increasing ratios": func(f map[string]any) { f["shape"].([]any)[4] = 0.01 },
	} {
		f := good()
		damage(f)
		b, _ := json.Marshal(f)
		if _, err := New(b, archsJSON); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v", want, err)
		}
	}
	if _, err := New([]byte("{"), archsJSON); err == nil || !strings.Contains(err.Error(), "parse fit") {
		t.Errorf("truncated: %v", err)
	}
}

// AtStolen: the idle whole, the dynamic part at the load over the time
// the vCPUs had, for that time only; the band's top as if the stolen time
// were the guest's. No steal is At.
func TestCurveAtStolen(t *testing.T) {
	var c Curve
	for l := range c.Points {
		w := 10.0
		if l > 0 {
			w = 20 + 10*float64(l)
		}
		c.Points[l] = Estimate{Watts: w, Lower: 0.8 * w, Upper: 1.25 * w}
	}
	for _, s := range []float64{0, -0.1, math.NaN()} {
		if got := c.AtStolen(0.35, s); got != c.At(0.35) {
			t.Errorf("stolen %v: %+v, want At(0.35) %+v", s, got, c.At(0.35))
		}
	}
	for _, tc := range []struct {
		util, stolen float64
		want         Estimate
	}{
		{0.35, 0.3, Estimate{Watts: 10 + 0.7*60, Lower: 8 + 0.7*48, Upper: 87.5}}, // load 50%
		{0.9, 0.3, Estimate{Watts: 10 + 0.7*110, Lower: 8 + 0.7*88, Upper: 150}},  // load clamped to 100%
		{0.2, 1, Estimate{Watts: 10, Lower: 8, Upper: 1.25 * 40}},                 // all stolen: idle only
		{0, 0.5, Estimate{Watts: 10, Lower: 8, Upper: 12.5}},                      // idle guest
	} {
		got := c.AtStolen(tc.util, tc.stolen)
		if math.Abs(got.Watts-tc.want.Watts) > 1e-9 || math.Abs(got.Lower-tc.want.Lower) > 1e-9 || math.Abs(got.Upper-tc.want.Upper) > 1e-9 {
			t.Errorf("util %v, stolen %v: %+v, want %+v", tc.util, tc.stolen, got, tc.want)
		}
	}
}
