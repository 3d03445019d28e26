// Package powertest checks the invariants every meter's cumulative
// energy keeps, whatever its source reads: it never decreases, is never NaN
// or infinite, and never grows faster than the zone's ceiling allows.
package powertest

import (
	"math"
	"testing"
	"time"
)

// Series follows one zone's cumulative joules across reads.
type Series struct {
	// Ceiling is the zone's power ceiling in watts.
	Ceiling float64
	// Slack allows for sources integrated over device timestamps that
	// differ from the host's (seconds); 0 for host-timed sources.
	Slack time.Duration

	started    bool
	last       float64
	lastChange time.Time
}

// Check records the zone's joules read at at and fails t if an invariant
// broke. what names the step in the failure.
func (s *Series) Check(t testing.TB, what string, j float64, at time.Time) {
	t.Helper()
	if math.IsNaN(j) || math.IsInf(j, 0) {
		t.Fatalf("%s: cumulative energy %v", what, j)
	}
	if !s.started {
		s.started, s.last, s.lastChange = true, j, at
		return
	}
	if j < s.last {
		t.Fatalf("%s: cumulative energy decreased from %v to %v", what, s.last, j)
	}
	if j > s.last {
		limit := s.Ceiling * (at.Sub(s.lastChange) + s.Slack).Seconds()
		if j-s.last > limit*(1+1e-9)+1e-9 {
			t.Fatalf("%s: +%v J in %v exceeds the %v W ceiling", what, j-s.last, at.Sub(s.lastChange), s.Ceiling)
		}
		s.last, s.lastChange = j, at
	}
}

// Last is the latest value checked.
func (s *Series) Last() float64 { return s.last }
