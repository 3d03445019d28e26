package redfish

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/power/powertest"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Property: a BMC that misbehaves on a random schedule (HTTP
// 500, readings of 1e308 W, 5e6 W, 700 W above the sensor's
// ReadingRangeMax of 600, negative watts, a sample that did not advance)
// never makes platform energy decrease, NaN/Inf or grow faster than the
// ceiling; the energy is exactly the trapezoid integral over the good
// samples, and every rejection is counted.
func TestBMCProperty(t *testing.T) {
	for seed := uint64(0); seed < 5; seed++ {
		r := rand.New(rand.NewPCG(seed, 40))
		b := newFakeBMC(t)
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		var mu sync.Mutex
		sensor, at := 300.0, t0
		b.set("/redfish/v1/Chassis/1U/Sensors/TotalPower", func(m map[string]any) {
			mu.Lock()
			defer mu.Unlock()
			m["Reading"] = sensor
			m["ReadingTime"] = at.Format(time.RFC3339)
		})
		m, err := NewMeter(b.config())
		if err != nil {
			t.Fatal(err)
		}
		now := t0
		const ceiling = 5000.0
		c := power.NewManualCachedWith(m, power.MeterOptions{Now: func() time.Time { return now }, MaxWatts: power.MaxWatts{reading.ZonePlatform: ceiling}})
		s := powertest.Series{Ceiling: ceiling}
		var want, prevW float64
		var prevT time.Time
		rejected := map[string]int{}
		for i := 0; i < 120; i++ {
			now = now.Add(time.Second)
			w := float64(r.IntN(600))
			good, dev, status := true, now, 0
			switch k := r.IntN(10); {
			case i == 0:
			case k == 0:
				w, good = 1e308, false
				rejected["out_of_range"]++
			case k == 1:
				w, good = 5e6, false
				rejected["out_of_range"]++
			case k == 2:
				w, good = 700, false // above ReadingRangeMax
				rejected["out_of_range"]++
			case k == 3:
				w, good = -5, false
				rejected["negative"]++
			case k == 4:
				status, good = 500, false
			case k == 5 && !prevT.IsZero():
				dev, good = prevT, false // the BMC has no new sample
			}
			mu.Lock()
			sensor, at = w, dev
			mu.Unlock()
			b.mu.Lock()
			b.status = status
			b.mu.Unlock()
			c.Poll(context.Background())
			if good {
				if !prevT.IsZero() {
					want += (prevW + w) / 2 * dev.Sub(prevT).Seconds()
				}
				prevW, prevT = w, dev
			}
			if samples, err := c.Read(context.Background()); err == nil {
				s.Check(t, fmt.Sprintf("seed %d step %d", seed, i), samples[0].Joules, now)
			}
		}
		if math.Abs(s.Last()-want) > 1e-6*want {
			t.Fatalf("seed %d: %v J, want %v J over the good samples", seed, s.Last(), want)
		}
		h := c.SourceHealth()
		for reason, n := range rejected {
			if h.Rejected[reason] != uint64(n) {
				t.Fatalf("seed %d: rejected %v, want %v", seed, h.Rejected, rejected)
			}
		}
		c.Close()
	}
}
