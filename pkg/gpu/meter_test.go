package gpu

import (
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// The meter never credits a backwards counter, integrates power over the
// time since the previous reading and rejects power above its ceiling.
func TestMeter(t *testing.T) {
	rej := reading.NewRejects("test", nil)
	m := NewMeter("test/0", 500, rej)
	t0 := time.Unix(0, 0)
	if _, ok := m.Counter(100, t0); ok {
		t.Fatal("baseline credited")
	}
	if d, ok := m.Counter(400, t0.Add(time.Second)); !ok || d != 300 || m.PowerW() != 300 {
		t.Fatalf("%v %v", d, ok)
	}
	if d, ok := m.Counter(50, t0.Add(2*time.Second)); ok || d != 0 {
		t.Fatal("backwards credited")
	}
	if d, ok := m.Counter(1600, t0.Add(3*time.Second)); ok || d != 0 {
		t.Fatal("1200 J in 2 s at a 500 W ceiling credited")
	}
	p := NewMeter("test/1", 500, rej)
	p.Power(100, t0)
	if d, ok := p.Power(200, t0.Add(2*time.Second)); !ok || d != 400 {
		t.Fatalf("%v %v", d, ok)
	}
	if _, ok := p.Power(math.NaN(), t0.Add(3*time.Second)); ok {
		t.Fatal("NaN credited")
	}
	c := rej.Counts()
	if c["backwards"] != 1 || c["too_fast"] != 1 || c["non_finite"] != 1 {
		t.Errorf("%v", c)
	}
	if h := m.Health(t0.Add(4 * time.Second)); h.Reads != 4 || h.Errors != 2 || h.Age != 3*time.Second {
		t.Errorf("%+v", h)
	}
}

func TestNormPCI(t *testing.T) {
	for in, want := range map[string]string{"00000000:3B:00.0": "0000:3b:00.0", "0000:03:00.0": "0000:03:00.0",
		"3b:00.0": "3b:00.0", "1:02:00.0": "0001:02:00.0"} {
		if got := NormPCI(in); got != want {
			t.Errorf("%s: %s want %s", in, got, want)
		}
	}
}

// A glitch (one implausible reading) followed by good readings: the
// reading after it carries the energy since the last accepted one over
// the time since then, so its power is the device's 300 W, never twice
// that, and no energy is lost. A rejected power reading leaves the clock
// where it was in the same way.
func TestMeterGlitchDoesNotDoubleInterval(t *testing.T) {
	rej := reading.NewRejects("test", nil)
	m := NewMeter("test/0", 1000, rej)
	t0 := time.Unix(0, 0)
	j := 1000.0
	var total float64
	for k := 0; k <= 6; k++ {
		v := j + 300*float64(k)
		if k == 3 {
			v = 1e9 // a glitch
		}
		d, ok := m.Counter(v, t0.Add(time.Duration(k)*time.Second))
		if k == 3 {
			if ok {
				t.Fatal("glitch credited")
			}
			continue
		}
		if k == 4 && (d != 600 || m.Interval() != 2*time.Second) {
			t.Fatalf("after the glitch: %v J over %v", d, m.Interval())
		}
		if k > 0 && m.PowerW() != 300 {
			t.Fatalf("interval %d: power %v W, want 300", k, m.PowerW())
		}
		total += d
	}
	if total != 1800 {
		t.Errorf("total %v J, want 1800", total)
	}
	p := NewMeter("test/1", 1000, rej)
	p.Power(300, t0)
	p.Power(1e6, t0.Add(time.Second))
	if d, ok := p.Power(300, t0.Add(2*time.Second)); !ok || d != 600 || p.Interval() != 2*time.Second {
		t.Errorf("power after a rejected reading: %v J over %v", d, p.Interval())
	}
}
