package model

import (
	"math"
	"testing"
	"time"
)

func TestLearnedIdle(t *testing.T) {
	l := NewLearnedIdle(0.1)
	if l.Learned() || l.Watts() != 0 {
		t.Fatal("new model already learned")
	}
	steps := []struct {
		dt          time.Duration
		energy, ut  float64
		wantIdle    float64 // answered from what was learned before this interval
		wantWatts   float64 // after it
		wantLearned bool
	}{
		{time.Second, 50, 0.5, 0, 0, false},           // busy: ignored
		{time.Second, 0, 0.0, 0, 0, false},            // zero energy: stale counter, ignored
		{0, 5, 0.0, 0, 0, false},                      // no duration: no power
		{time.Second, math.NaN(), 0.0, 0, 0, false},   // garbage energy
		{time.Second, 10, math.NaN(), 0, 0, false},    // garbage utilization
		{2 * time.Second, 40, 0.05, 0, 20, true},      // first eligible: learns 20 W, still answers 0
		{time.Second, 30, 0.05, 20, 20, true},         // higher: keeps 20 W
		{time.Second, 10, 0.9, 20, 20, true},          // low power but busy: ignored
		{4 * time.Second, 60, 0.1, 80, 15, true},      // at the threshold counts: 15 W
		{2 * time.Second, 100, 1, 30, 15, true},       // answers 15 W × 2 s
		{500 * time.Millisecond, 5, 0, 7.5, 10, true}, // new minimum 10 W
	}
	for i, s := range steps {
		got := l.IdleJ(s.dt, s.energy, s.ut)
		if got != s.wantIdle || l.Watts() != s.wantWatts || l.Learned() != s.wantLearned {
			t.Fatalf("step %d: idle %v watts %v learned %v, want %v %v %v",
				i, got, l.Watts(), l.Learned(), s.wantIdle, s.wantWatts, s.wantLearned)
		}
	}
}

// A new minimum makes the previous baseline too high for the interval that
// revealed it; Split must clamp and say so.
func TestLearnedIdleClampsOnNewMinimum(t *testing.T) {
	l := NewLearnedIdle(0.2)
	l.IdleJ(time.Second, 20, 0) // learns 20 W
	in := Interval[string]{EnergyJ: 12, IdleJ: l.IdleJ(time.Second, 12, 0), Usage: map[string]float64{"a": 1}}
	r := Split(in, map[string]float64{}, nil)
	if !r.Clamped || r.IdleJ != 12 || r.DynamicJ != 0 || l.Watts() != 12 {
		t.Fatalf("result %+v watts %v, want clamp to 12 J and baseline 12 W", r, l.Watts())
	}
}
