package reading

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Unix(1_700_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func reason(t *testing.T, err error) Reason {
	t.Helper()
	var r *Rejection
	if !errors.As(err, &r) {
		t.Fatalf("want a *Rejection, got %v", err)
	}
	return r.Reason
}

func TestCheckGauge(t *testing.T) {
	for _, c := range []struct {
		v, max float64
		want   Reason
	}{
		{math.NaN(), 0, NonFinite}, {math.Inf(1), 0, NonFinite}, {1e308, 600, OutOfRange},
		{5e6, 600, OutOfRange}, {-1, 0, Negative},
	} {
		if got := reason(t, CheckGauge(c.v, c.max)); got != c.want {
			t.Errorf("CheckGauge(%g, %g) = %s, want %s", c.v, c.max, got, c.want)
		}
	}
	if err := CheckGauge(600, 600); err != nil {
		t.Errorf("600 of 600: %v", err)
	}
}

// RAPL's issue cases: a 100 J step back is no wraparound, a 200 kJ jump in
// one second is no reading, and a real wrap near the top is accepted.
func TestCounterRAPLCases(t *testing.T) {
	const maxUJ = 262_143_328_850.0
	c := Counter{Max: maxUJ, MaxRate: 2_000e6} // 2 kW in µJ/s
	if d, err := c.Observe(20_000e6, at(0)); d != 0 || err != nil {
		t.Fatalf("baseline: %g %v", d, err)
	}
	if d, err := c.Observe(20_050e6, at(1)); d != 50e6 || err != nil {
		t.Fatalf("50 J: %g %v", d, err)
	}
	if _, err := c.Observe(19_950e6, at(2)); reason(t, err) != Backwards {
		t.Fatalf("100 J back accepted")
	}
	// The next reading continues from the old baseline: the step back was
	// a glitch and nothing is lost.
	if d, err := c.Observe(20_150e6, at(3)); d != 100e6 || err != nil {
		t.Fatalf("after glitch: %g %v", d, err)
	}
	if _, err := c.Observe(220_150e6, at(4)); reason(t, err) != TooFast {
		t.Fatalf("200 kJ in 1 s accepted")
	}
	if _, err := c.Observe(maxUJ+1, at(4)); reason(t, err) != OutOfRange {
		t.Fatalf("beyond the range accepted")
	}
	if d, err := c.Observe(20_200e6, at(5)); d != 50e6 || err != nil {
		t.Fatalf("after jump: %g %v", d, err)
	}
	// A genuine wrap: near the top, then near the bottom, at a plausible rate.
	w := Counter{Max: maxUJ, MaxRate: 2_000e6}
	w.Observe(maxUJ-30e6, at(0))
	if d, err := w.Observe(20e6, at(1)); err != nil || math.Abs(d-50e6) > 1 {
		t.Fatalf("wrap: %g %v", d, err)
	}
}

// A reset (driver reload) drops only the interval spanning it; the counter
// then resumes from the new baseline.
func TestCounterReset(t *testing.T) {
	c := Counter{MaxRate: 1000}
	c.Observe(5000, at(0))
	c.Observe(5100, at(1))
	if _, err := c.Observe(3, at(2)); reason(t, err) != Backwards {
		t.Fatal("reset accepted")
	}
	if d, err := c.Observe(40, at(3)); d != 37 || err != nil {
		t.Fatalf("after reset: %g %v", d, err)
	}
	if d, err := c.Observe(90, at(4)); d != 50 || err != nil {
		t.Fatalf("resumed: %g %v", d, err)
	}
}

func TestCounterNoRateLiteralWrap(t *testing.T) {
	c := Counter{Max: 1000}
	c.Observe(500, at(0))
	if _, err := c.Observe(400, at(1)); reason(t, err) != Backwards {
		t.Fatal("step back from the middle taken for a wrap")
	}
	c = Counter{Max: 1000}
	c.Observe(990, at(0))
	if d, err := c.Observe(10, at(1)); d != 20 || err != nil {
		t.Fatalf("wrap: %g %v", d, err)
	}
}

// Property: over random sequences of good readings, glitches, resets,
// wraps, NaN and huge values, no increase is negative or non-finite, none
// exceeds the ceiling over the time since the last accepted reading, and
// every good reading that follows a true baseline is accepted and credited
// exactly what the counter really gained, readings rejected in between
// included (nothing lost).
func TestCounterProperty(t *testing.T) {
	const max, rate = 1e6, 100.0
	r := rand.New(rand.NewPCG(1, 2))
	for seq := 0; seq < 2000; seq++ {
		c := Counter{Max: max, MaxRate: rate}
		truth := r.Float64() * max
		now := 0.0
		c.Observe(truth, at(now))
		baseTrue, baseT, since := true, now, 0.0
		for i := 0; i < 200; i++ {
			dt := 0.5 + r.Float64()
			now += dt
			inc := r.Float64() * rate * dt
			truth = math.Mod(truth+inc, max)
			since += inc
			v, bad := truth, true
			switch r.IntN(20) {
			case 0:
				v = math.NaN()
			case 1:
				v = 1e308
			case 2:
				v = truth / 2
			case 3:
				v = truth + max/3
			case 4:
				truth = r.Float64() * 10 // a reset
				v, baseTrue = truth, false
			default:
				bad = false
			}
			d, err := c.Observe(v, at(now))
			if d < 0 || math.IsNaN(d) || math.IsInf(d, 0) {
				t.Fatalf("seq %d step %d: increase %g", seq, i, d)
			}
			if d > rate*(now-baseT)+1e-6 {
				t.Fatalf("seq %d step %d: increase %g beyond the ceiling", seq, i, d)
			}
			if !bad && baseTrue {
				if err != nil {
					t.Fatalf("seq %d step %d: good reading rejected: %v", seq, i, err)
				}
				if math.Abs(d-since) > 1e-6 {
					t.Fatalf("seq %d step %d: credited %g, gained %g", seq, i, d, since)
				}
			}
			if err == nil {
				baseTrue, baseT, since = !bad, now, 0
			}
		}
	}
}

func TestRejectsCountsAndRateLimits(t *testing.T) {
	r := NewRejects("rapl", nil)
	now := t0
	r.now = func() time.Time { return now }
	for i := 0; i < 5; i++ {
		if !r.Add(Reject(TooFast, 1, ""), "package-0") {
			t.Fatal("rejection not counted")
		}
	}
	if r.Add(errors.New("io"), "x") {
		t.Fatal("plain error counted as rejection")
	}
	if got := r.Counts()["too_fast"]; got != 5 {
		t.Fatalf("too_fast = %d", got)
	}
	if len(r.logged) != 1 {
		t.Fatalf("logged reasons %v", r.logged)
	}
}

// A counter that cannot restart never takes a lower reading as its
// baseline, however many consistent ones follow.
func TestCounterNeverResets(t *testing.T) {
	c := Counter{MaxRate: 100, NeverResets: true}
	c.Observe(1000, at(0))
	for i := 1; i <= 3; i++ {
		if _, err := c.Observe(500, at(float64(i))); reason(t, err) != Backwards {
			t.Fatalf("read %d: lower reading accepted", i)
		}
	}
	if d, err := c.Observe(1050, at(4)); d != 50 || err != nil {
		t.Fatalf("recovery: %g %v", d, err)
	}
}

// Slack lets a reading carry up to MaxRate × Slack more than its interval
// allows, and no more.
func TestCounterSlack(t *testing.T) {
	c := Counter{MaxRate: 100, Slack: 500 * time.Millisecond}
	c.Observe(0, at(0))
	if d, err := c.Observe(149, at(1)); d != 149 || err != nil {
		t.Fatalf("149 in 1 s with 0.5 s of slack at 100/s: %g %v, want accepted", d, err)
	}
	if _, err := c.Observe(149+151, at(2)); reason(t, err) != TooFast {
		t.Fatalf("151 in 1 s: accepted, want too_fast")
	}
	strict := Counter{MaxRate: 100}
	strict.Observe(0, at(0))
	if _, err := strict.Observe(101, at(1)); reason(t, err) != TooFast {
		t.Fatalf("without slack 101 in 1 s: accepted, want too_fast")
	}
}
