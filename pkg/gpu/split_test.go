package gpu

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func sum(m map[int]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// Property: whatever the weights (many processes, MIG or not, weights over
// many orders of magnitude, zeros), idle + Σ processes + unattributed =
// energy to 1e-9 relative, nothing is negative, and unattributed is 0 when
// any process had a positive weight (non-MIG).
func TestSplitConserves(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var res Result
	for n := 0; n < 3000; n++ {
		rd := Reading{OK: true, EnergyJ: r.Float64() * 1000, Interval: time.Second, Basis: SMUtil}
		mk := func() map[int]float64 {
			u := map[int]float64{}
			for i := 0; i < r.IntN(120); i++ {
				u[r.IntN(100000)] = math.Pow(10, r.Float64()*12-6) * float64(r.IntN(2))
			}
			return u
		}
		if r.IntN(3) == 0 {
			for i := 0; i < 1+r.IntN(7); i++ {
				rd.Instances = append(rd.Instances, Instance{Name: string(rune('a' + i)), Weight: float64(r.IntN(5) * 14), Usage: mk()})
			}
		} else {
			rd.Usage = mk()
		}
		Split(rd, &model.ConfiguredIdle{Watts: r.Float64() * 600}, Options{}, &res)
		for _, v := range res.Processes {
			if !(v > 0) {
				t.Fatalf("non-positive share %v", v)
			}
		}
		if got := res.IdleJ + sum(res.Processes) + res.UnattributedJ; !near(got, rd.EnergyJ) && rd.EnergyJ > 0 {
			t.Fatalf("case %d: %v != %v", n, got, rd.EnergyJ)
		}
		if rd.Instances == nil && len(res.Processes) > 0 && res.UnattributedJ != 0 {
			t.Fatalf("unattributed %v with processes", res.UnattributedJ)
		}
	}
}

// The learned idle model sees the device's utilization; a passed-through
// device is wholly its holder's; idle goes to the holder under "holder";
// a reading that is not OK credits nothing.
func TestSplitIdleAndHolder(t *testing.T) {
	learn := model.NewLearnedIdle(0)
	var res Result
	Split(Reading{OK: true, EnergyJ: 60, Interval: time.Second, Utilization: 0}, learn, Options{}, &res)
	Split(Reading{OK: true, EnergyJ: 300, Interval: time.Second, Utilization: 0.9, Usage: map[int]float64{1: 1}}, learn, Options{}, &res)
	if !near(res.IdleJ, 60) || !near(res.Processes[1], 240) {
		t.Fatalf("learned idle: %+v", res)
	}
	Split(Reading{OK: true, EnergyJ: 300, Interval: time.Second}, learn, Options{Whole: true}, &res)
	if res.HolderJ != 300 || len(res.Processes) != 0 {
		t.Fatalf("whole: %+v", res)
	}
	Split(Reading{OK: true, EnergyJ: 300, Interval: time.Second}, learn, Options{IdleToHolder: true}, &res)
	if !near(res.HolderJ, 60) || !near(res.UnattributedJ, 240) {
		t.Fatalf("holder: %+v", res)
	}
	Split(Reading{OK: false, EnergyJ: 300, Usage: map[int]float64{1: 1}}, learn, Options{}, &res)
	if res.EnergyJ != 0 || len(res.Processes) != 0 {
		t.Fatalf("not OK credited: %+v", res)
	}
}

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
