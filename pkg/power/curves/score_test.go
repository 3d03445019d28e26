package curves

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// A point the predictor cannot answer (an error, or watts that are not
// finite and positive) is counted, not dropped and not fatal: the
// quantiles are over the answered points, the band's coverage over all.
func TestScoreCountsUnanswered(t *testing.T) {
	r := Result{ID: "a", Sockets: 1, Threads: 4, Cores: 2, MemoryGiB: 16}
	for l := range r.Watts {
		r.Watts[l] = 100
	}
	a, err := Score([]Result{r}, func(_ Result, l int) (Estimate, error) {
		switch l {
		case 0:
			return Estimate{}, errors.New("no curve")
		case 1:
			return Estimate{Watts: math.NaN()}, nil
		case 2:
			return Estimate{Watts: 100, Lower: 101, Upper: 120}, nil // a band that misses its own watts
		}
		return Estimate{Watts: 110, Lower: 90, Upper: 120}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if a.Cases != NumLevels || a.Unanswered != 3 || math.Abs(a.MedianAbs-0.1) > 1e-12 || math.Abs(a.InBand-8.0/11) > 1e-12 {
		t.Errorf("%+v: want 11 cases, 3 unanswered, median 10%%, 8 of 11 in band", a)
	}
	if _, err := Score(nil, nil); err == nil {
		t.Error("no results scored")
	}
	none := Summarise([]Case{{Result: r, Err: errors.New("x")}})
	if none.Unanswered != 1 || !math.IsNaN(none.MedianAbs) || !math.IsNaN(none.InBand) {
		t.Errorf("nothing answered: %+v", none)
	}
}

// Each case falls in one segment of each axis: load band, sockets and
// memory per core (per thread when the cores are unknown).
func TestBySegment(t *testing.T) {
	mk := func(id string, sockets, threads, cores int, mem float64) Result {
		r := Result{ID: id, Sockets: sockets, Threads: threads, Cores: cores, MemoryGiB: mem}
		for l := range r.Watts {
			r.Watts[l] = 100
		}
		return r
	}
	rs := []Result{mk("one", 1, 8, 4, 4), mk("two", 2, 32, 16, 48), mk("four", 4, 64, 0, 512)}
	segs := BySegment(Predict(rs, func(r Result, l int) (Estimate, error) {
		if r.ID == "four" && l == 0 {
			return Estimate{}, errors.New("none")
		}
		return Estimate{Watts: 100}, nil
	}))
	want := map[string][2]int{ // results, cases
		"load/active idle": {3, 3}, "load/10-30%": {3, 9}, "load/40-70%": {3, 12}, "load/80-100%": {3, 9},
		"sockets/1": {1, 11}, "sockets/2": {1, 11}, "sockets/4 or more": {1, 11},
		"memory per core/under 2 GiB": {1, 11}, "memory per core/2-4 GiB": {1, 11}, "memory per core/4 GiB or more": {1, 11},
	}
	if len(segs) != len(want) {
		t.Fatalf("%d segments, want %d", len(segs), len(want))
	}
	for _, s := range segs {
		k := s.Axis + "/" + s.Name
		if w, ok := want[k]; !ok || s.Results != w[0] || s.Cases != w[1] {
			t.Errorf("%s: %d results, %d cases; want %v", k, s.Results, s.Cases, w)
		}
		if unans := s.Unanswered; (k == "load/active idle" || k == "sockets/4 or more" || k == "memory per core/4 GiB or more") != (unans == 1) {
			t.Errorf("%s: %d unanswered", k, unans)
		}
	}
}

func TestReadResultsCores(t *testing.T) {
	head := "id,cpu_name,tdp_w,chips,cores,threads,memory_gb,load_100_watts,load_90_watts,load_80_watts,load_70_watts,load_60_watts,load_50_watts,load_40_watts,load_30_watts,load_20_watts,load_10_watts,active_idle_watts\n"
	row := func(id, cores string) string {
		return id + ",Intel Xeon Gold 6248,150,2," + cores + ",80,192,400,380,360,340,320,300,280,260,240,220,120\n"
	}
	rs, skipped, _, err := ReadResults(strings.NewReader(head + row("a", "40") + row("b", "x") + row("c", "81")))
	if err != nil || skipped != 0 || len(rs) != 3 {
		t.Fatalf("%d results, %d skipped, %v", len(rs), skipped, err)
	}
	if rs[0].Cores != 40 || rs[1].Cores != 0 || rs[2].Cores != 0 {
		t.Errorf("cores %d %d %d, want 40 and unknown (not a number, more than the threads)", rs[0].Cores, rs[1].Cores, rs[2].Cores)
	}
	if rs[0].Watts[0] != 120 || rs[0].Watts[NumLevels-1] != 400 || rs[0].MemoryPerCore() != 192.0/40 || rs[1].MemoryPerCore() != 192.0/80 {
		t.Errorf("%+v", rs[0])
	}
}

// Split parts the results by HeldOut, and a fit records the digest of the
// ids it was trained on, whatever their order.
func TestSplitAndFittedDigest(t *testing.T) {
	rs := synthetic(200, 0.05, 9)
	fitted, held := Split(rs)
	if len(fitted)+len(held) != len(rs) || len(held) == 0 || len(fitted) == 0 {
		t.Fatalf("%d fitted, %d held out of %d", len(fitted), len(held), len(rs))
	}
	for _, r := range held {
		if !HeldOut(r.ID) {
			t.Errorf("%s held out but HeldOut is false", r.ID)
		}
	}
	for _, r := range fitted {
		if HeldOut(r.ID) {
			t.Errorf("%s fitted but HeldOut is true", r.ID)
		}
	}
	f, err := Train(fitted, DefaultOptions)
	if err != nil {
		t.Fatal(err)
	}
	rev := append([]Result(nil), fitted...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	if f.FittedDigest != IDDigest(rev) || f.FittedDigest == IDDigest(rs) || len(f.FittedDigest) != 64 {
		t.Errorf("digest %q: want the fitted ids' in any order, not all results'", f.FittedDigest)
	}
	// The sha256 of "a\nb\n", so a digest in fit.json can be checked
	// with sha256sum.
	if d := IDDigest([]Result{{ID: "b"}, {ID: "a"}}); d != "911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2" {
		t.Errorf("digest of a, b: %s", d)
	}
}

// Servers with 2 GiB or more per thread whose power scatters three times
// as far as the rest's: the fit gives them a band about three times as
// wide, which holds about 90% of fresh such servers, where the one band
// for all would hold far fewer; the rest's band stays near their own
// noise.
func TestMemoryHeavyBand(t *testing.T) {
	const sigma = 0.06
	gen := func(n int, seed uint64) []Result {
		rng := rand.New(rand.NewPCG(seed, 2))
		out := synthetic(n, 0, seed)
		for i := range out {
			// A third memory-heavy (4 GiB per thread), the rest 1 GiB.
			s := sigma
			out[i].MemoryGiB = float64(out[i].Threads)
			if i%3 == 0 {
				out[i].MemoryGiB *= 4
				s = 3 * sigma
			}
			noise := math.Exp(rng.NormFloat64() * s)
			for l := range out[i].Watts {
				out[i].Watts[l] *= noise
			}
			out[i].ID = fmt.Sprint("h", seed, "-", i)
		}
		return out
	}
	coverage := func(opt Options) (heavy, light float64, f Fit) {
		f, err := Train(gen(300, 1), opt)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(f)
		m, err := New(b, archsJSON)
		if err != nil {
			t.Fatal(err)
		}
		var hv, lt []Case
		for _, c := range Predict(gen(400, 3), func(r Result, l int) (Estimate, error) {
			c, err := m.Server(Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB})
			return c.Points[l], err
		}) {
			if c.Result.MemoryGiB/float64(c.Result.Threads) >= 2 {
				hv = append(hv, c)
			} else {
				lt = append(lt, c)
			}
		}
		return Summarise(hv).InBand, Summarise(lt).InBand, f
	}
	heavy, light, f := coverage(DefaultOptions)
	if f.HeavyMemory != 2 {
		t.Fatalf("fit's memory-heavy threshold %v, want 2 GiB per thread", f.HeavyMemory)
	}
	cpu := f.Tiers[0]
	for l := range cpu.Low {
		if r := cpu.HighHeavy[l] / cpu.High[l]; r < 2 || r > 4.5 {
			t.Errorf("level %v: heavy band top %.3f, the rest's %.3f: ratio %.2f, want about 3", Levels[l], cpu.HighHeavy[l], cpu.High[l], r)
		}
	}
	if heavy < 0.82 || heavy > 0.97 || light < 0.82 || light > 0.97 {
		t.Errorf("with the heavy band: heavy servers %.3f in band, the rest %.3f; want about 0.9 each", heavy, light)
	}
	o := DefaultOptions
	o.HeavyMemory = 0
	heavy0, light0, _ := coverage(o)
	t.Logf("heavy servers in band: %.3f with their band, %.3f with one for all; the rest %.3f and %.3f", heavy, heavy0, light, light0)
	if heavy0 > heavy-0.05 || light0 < light+0.03 {
		t.Errorf("one band for all: heavy servers %.3f in band, the rest %.3f; want the heavy under-covered, the rest over", heavy0, light0)
	}
}
