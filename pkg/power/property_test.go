package power

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/power/powertest"
	"github.com/wattrace/wattrace/pkg/reading"
)

// raplStep is one interval of a simulated RAPL package counter: the true
// counter moves on at a plausible power, and what the file shows is the
// truth or one of the ways a reading goes wrong.
type raplStep int

const (
	good     raplStep = iota
	stepBack          // 100 J below the truth (no wraparound)
	jump              // kilojoules ahead within the range (far above the ceiling)
	beyond            // above max_energy_range_uj
	garbage           // not a number
	missing           // no energy_uj file
	empty             // an empty file
	numSteps
)

// raplSequence runs one random sequence against a fixture tree and checks
// the invariants at every Read; at the end every good interval must have
// been credited exactly: glitches and unreadable files cost nothing.
func raplSequence(t *testing.T, r *rand.Rand, steps int, kinds func(i int, prevBad bool) raplStep) {
	const (
		maxUJ   = 10_000_000_000 // 10 kJ: wraps every ~130 reads
		ceiling = 200.0
	)
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", uint64(r.Int64N(maxUJ)), maxUJ)
	energy := filepath.Join(root, "class", "powercap", "intel-rapl:0", "energy_uj")
	r0, clock, err := testRAPLClock(root, MeterOptions{MaxWatts: MaxWatts{reading.ZonePackage: ceiling}})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(energy)
	truth, _ := strconv.ParseUint(string(b[:len(b)-1]), 10, 64)
	s := powertest.Series{Ceiling: ceiling}
	s.Check(t, "baseline", joulesOf(t, mustRead(t, r0), reading.ZonePackage, 0), clock.t)
	var credited, readErrs float64
	counts := map[raplStep]int{}
	prevBad, badRun := false, 0
	for i := 0; i < steps; i++ {
		inc := uint64(r.Float64() * 150e6) // 0-150 W for 1 s, in µJ
		truth = (truth + inc) % maxUJ
		credited += float64(inc) / 1e6
		k := kinds(i, prevBad)
		if badRun >= 10 {
			// Bound the gap: past ~25 s a 5 kJ jump would be plausible
			// at the 200 W ceiling, and no longer a glitch.
			k = good
		}
		if k == good {
			badRun = 0
		} else {
			badRun++
		}
		counts[k]++
		var content string
		switch k {
		case good:
			content = strconv.FormatUint(truth, 10)
		case stepBack:
			content = strconv.FormatUint((truth+maxUJ-300_000_000)%maxUJ, 10)
		case jump:
			content = strconv.FormatUint((truth+5_000_000_000)%maxUJ, 10)
		case beyond:
			content = strconv.FormatUint(maxUJ+1+uint64(r.Int64N(1e12)), 10)
		case garbage:
			content = "xyz"
		case empty:
			content = ""
		}
		if k == missing {
			os.Remove(energy)
		} else if err := os.WriteFile(energy, []byte(content+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// One zone: every unreadable file fails the whole Read.
		samples, err := r0.Read(context.Background())
		if err != nil {
			readErrs++
			if k != missing && k != garbage && k != empty {
				t.Fatalf("step %d (%d): %v", i, k, err)
			}
			prevBad = true
			continue
		}
		s.Check(t, fmt.Sprintf("step %d kind %d", i, k), joulesOf(t, samples, reading.ZonePackage, 0), clock.t)
		prevBad = k != good
	}
	// The last reading is good, so all the energy up to it is in.
	if got := s.Last(); math.Abs(got-credited) > 1e-6*credited+1e-6 {
		t.Fatalf("credited %v J, the counter gained %v J (steps %v)", got, credited, counts)
	}
	h := r0.Health()[0]
	if h.Errors != uint64(readErrs) {
		t.Fatalf("health errors %d, want %v", h.Errors, readErrs)
	}
	// (A step back smaller than what the counter gained since the last
	// accepted reading is indistinguishable from a slower interval and is
	// rightly accepted; TestRAPLRejectsStepBackAndJump pins the rejection.)
	// A jump past the top of the range reads as a step back.
	if counts[jump] > 0 && h.Rejected["too_fast"]+h.Rejected["backwards"] == 0 ||
		counts[beyond] > 0 && h.Rejected["out_of_range"] == 0 || counts[garbage]+counts[empty] > 0 && h.Rejected["unreadable"] == 0 {
		t.Fatalf("rejections %v for steps %v", h.Rejected, counts)
	}
}

// Property: over random sequences of good readings, wraps, steps
// back, jumps, values beyond the range, garbage, empty and missing files,
// the package energy never decreases, is never NaN/Inf, never grows faster
// than the ceiling, and every good interval is credited. A value glitch is
// isolated (followed by a good reading or an unreadable file), as a
// glitch is; runs of unreadable files are any length.
func TestRAPLProperty(t *testing.T) {
	for seed := uint64(0); seed < 8; seed++ {
		r := rand.New(rand.NewPCG(seed, 10))
		t.Run(strconv.FormatUint(seed, 10), func(t *testing.T) {
			raplSequence(t, r, 300, func(i int, prevBad bool) raplStep {
				if i == 299 || r.IntN(4) != 0 {
					return good
				}
				k := raplStep(1 + r.IntN(int(numSteps)-1))
				if prevBad && k < garbage {
					return good
				}
				return k
			})
		})
	}
}

// FuzzRAPLSequence drives the RAPL meter with any sequence of steps.
func FuzzRAPLSequence(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 0, 3, 4, 5, 6, 0})
	f.Add([]byte{1, 1, 1, 2, 2, 2, 0, 0})
	f.Fuzz(func(t *testing.T, seq []byte) {
		if len(seq) > 200 {
			seq = seq[:200]
		}
		r := rand.New(rand.NewPCG(uint64(len(seq)), 1))
		raplSequence(t, r, len(seq)+1, func(i int, prevBad bool) raplStep {
			if i >= len(seq) {
				return good
			}
			k := raplStep(seq[i] % byte(numSteps))
			if prevBad && k != good && k < garbage {
				return good // keep value glitches isolated, as the exact-credit check assumes
			}
			return k
		})
	})
}

// Property for pm_counters: glitches (a step back, a jump, garbage) and
// controller restarts (startup changes, counters restart low). No zone
// decreases or outruns its ceiling; with no restart, every joule between
// the first and last good read is credited.
func TestPMCountersProperty(t *testing.T) {
	for seed := uint64(0); seed < 6; seed++ {
		r := rand.New(rand.NewPCG(seed, 20))
		withResets := seed%2 == 1
		root := copyFixture(t, "pm-counters")
		dir := filepath.Join(root, "cray", "pm_counters")
		clock := newTick()
		const ceiling = 3000.0
		p, err := newPMCounters(root, os.ReadFile, MeterOptions{Now: clock.now, MaxWatts: MaxWatts{reading.ZonePlatform: ceiling}})
		if err != nil {
			t.Fatal(err)
		}
		truth := uint64(4_000_000)
		gained, startup, prevBad, resets := 0.0, 1700000000000000, false, 0
		writeFile(t, filepath.Join(dir, "energy"), fmt.Sprintf("%d J\n", truth))
		writeFile(t, filepath.Join(dir, "startup"), fmt.Sprintf("%d\n", startup))
		s := powertest.Series{Ceiling: ceiling}
		s.Check(t, "baseline", joulesOf(t, mustRead(t, p), reading.ZonePlatform, -1), clock.t)
		for i := 0; i < 200; i++ {
			inc := uint64(r.IntN(2500))
			truth += inc
			gained += float64(inc)
			val := fmt.Sprintf("%d J", truth)
			k := r.IntN(8)
			if i == 199 || prevBad {
				k = 0
			}
			switch k {
			case 1:
				val = fmt.Sprintf("%d J", truth-100)
			case 2:
				val = fmt.Sprintf("%d J", truth+1_000_000)
			case 3:
				val = "12ab J"
			case 4:
				if withResets {
					startup++
					truth = uint64(r.IntN(100))
					val = fmt.Sprintf("%d J", truth)
					resets++
				}
			}
			writeFile(t, filepath.Join(dir, "startup"), fmt.Sprintf("%d\n", startup))
			writeFile(t, filepath.Join(dir, "energy"), val+"\n")
			samples, err := p.Read(context.Background())
			prevBad = k != 0
			if err != nil {
				if k != 3 {
					t.Fatalf("seed %d step %d: %v", seed, i, err)
				}
				continue
			}
			s.Check(t, fmt.Sprintf("seed %d step %d", seed, i), joulesOf(t, samples, reading.ZonePlatform, -1), clock.t)
		}
		if !withResets && math.Abs(s.Last()-gained) > 1e-6 {
			t.Fatalf("seed %d: credited %v J, gained %v J", seed, s.Last(), gained)
		}
		if withResets && (s.Last() > gained || resets == 0) {
			t.Fatalf("seed %d: credited %v J of %v J gained over %d restarts", seed, s.Last(), gained, resets)
		}
		h := p.Health()[0]
		// (A step back smaller than the interval's gain looks like a
		// slower interval and is rightly accepted, so only jumps are sure
		// to be rejected.)
		if h.Rejected["too_fast"] == 0 || h.Errors == 0 {
			t.Fatalf("seed %d: health %+v", seed, h)
		}
	}
}

// Property for hwmon power sensors read through Cached: garbage, values far
// above the ceiling and missing files are rejected or fail the read; the
// energy is exactly the trapezoid integral over the good samples.
func TestHwmonProperty(t *testing.T) {
	for seed := uint64(0); seed < 6; seed++ {
		r := rand.New(rand.NewPCG(seed, 30))
		root := copyFixture(t, "hwmon")
		h, err := NewHwmon(root, HwmonZones{"power_meter": reading.ZonePlatform})
		if err != nil {
			t.Fatal(err)
		}
		file := filepath.Join(h.chips[0].dir, h.chips[0].files[0])
		now := time.Unix(1_700_000_000, 0)
		const ceiling = 2000.0
		c := NewManualCachedWith(h, MeterOptions{Now: func() time.Time { return now }, MaxWatts: MaxWatts{reading.ZonePlatform: ceiling}})
		s := powertest.Series{Ceiling: ceiling}
		var want float64
		var prevW float64
		var prevT time.Time
		for i := 0; i < 200; i++ {
			now = now.Add(time.Duration(500+r.IntN(1000)) * time.Millisecond)
			w := r.Float64() * 1500
			content := strconv.FormatUint(uint64(w*1e6), 10)
			ok := true
			switch r.IntN(10) {
			case 0:
				content, ok = "1000000000000000", false // 1 GW
			case 1:
				content, ok = "-5", false
			case 2:
				content, ok = "", false
			case 3:
				os.Remove(file)
				content, ok = "\x00missing", false
			}
			if content != "\x00missing" {
				writeFile(t, file, content+"\n")
			}
			c.Poll(context.Background())
			if ok {
				w = float64(uint64(w*1e6)) / 1e6
				if !prevT.IsZero() {
					want += (prevW + w) / 2 * now.Sub(prevT).Seconds()
				}
				prevW, prevT = w, now
			}
			if samples, err := c.Read(context.Background()); err == nil {
				s.Check(t, fmt.Sprintf("seed %d step %d", seed, i), samples[0].Joules, now)
			}
		}
		if math.Abs(s.Last()-want) > 1e-6*want {
			t.Fatalf("seed %d: %v J, want the integral over good samples %v J", seed, s.Last(), want)
		}
		if hh := c.SourceHealth(); hh.Rejected["out_of_range"] == 0 || hh.Errors == 0 {
			t.Fatalf("seed %d: health %+v", seed, hh)
		}
	}
}
