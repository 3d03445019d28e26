package redfish

import (
	"context"
	"math"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/pkg/power"
)

// One reading of 1e308 W (a BMC glitch) made platform
// power NaN and froze its energy for good while up stayed 1; 5e6 W was
// accepted although the sensor declares ReadingRangeMax 600. Now both are
// rejected, counted and logged; energy stays finite and the good samples
// around them are integrated over the gap; up is 0 while the latest
// reading was refused.
func TestGlitchesRejected(t *testing.T) {
	b := newFakeBMC(t)
	// Request 0 is discovery's; then one poll per entry.
	watts := []float64{374, 374, 1e308, 5e6, 380, -5, 390}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sensorClock(b, t0, func(i int) float64 { return watts[min(i, len(watts)-1)] })
	m, err := NewMeter(b.config())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	now := t0
	c := power.NewManualCachedWith(m, power.MeterOptions{Log: zap.New(core), Now: func() time.Time { return now }})
	defer c.Close()
	ups := []bool{}
	for range watts[1:] {
		now = now.Add(time.Second)
		c.Poll(context.Background())
		ups = append(ups, c.SourceHealth().Up)
	}
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// 374 W at t1, 380 W at t4, 390 W at t6 (device times): trapezoids
	// over 3 s and 2 s.
	want := (374+380)/2.0*3 + (380+390)/2.0*2
	if j := s[0].Joules; math.IsNaN(j) || math.IsInf(j, 0) || math.Abs(j-want) > 1e-9 {
		t.Fatalf("platform = %v J, want %v", j, want)
	}
	h := c.SourceHealth()
	if h.Rejected["out_of_range"] != 2 || h.Rejected["negative"] != 1 || h.Reads != 6 || h.Errors != 3 {
		t.Fatalf("health %+v, want out_of_range=2 negative=1 reads=6 errors=3", h)
	}
	if wantUp := []bool{true, false, false, true, false, true}; !equalBools(ups, wantUp) {
		t.Fatalf("up per poll %v, want %v", ups, wantUp)
	}
	if logs.FilterMessage("rejected reading, not credited").Len() != 2 {
		t.Fatalf("warn lines: %v", logs.All())
	}
}

// A failing read is logged at warn, rate
// limited, not only counted.
func TestReadErrorsLoggedAtWarn(t *testing.T) {
	b := newFakeBMC(t)
	m, err := NewMeter(b.config())
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.WarnLevel)
	now := time.Now()
	c := power.NewManualCachedWith(m, power.MeterOptions{Log: zap.New(core), Now: func() time.Time { return now }})
	defer c.Close()
	b.missing["/redfish/v1/Chassis/1U"] = true
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		c.Poll(context.Background())
	}
	if h := c.SourceHealth(); h.Errors != 5 || h.Up {
		t.Fatalf("health %+v", h)
	}
	if n := logs.FilterMessage("source read failed").Len(); n != 1 {
		t.Fatalf("%d warn lines in 5 s, want 1 (rate-limited)", n)
	}
	now = now.Add(2 * time.Minute)
	c.Poll(context.Background())
	if n := logs.FilterMessage("source read failed").Len(); n != 2 {
		t.Fatalf("%d warn lines after a minute, want 2", n)
	}
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
