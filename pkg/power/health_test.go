package power

import (
	"errors"
	"testing"
	"time"
)

// A combined meter reports the health of its background members only, as
// the wattrace_power_meter_* families expect: a meter read synchronously
// each interval (RAPL) has no age to report.
func TestCombinedHealthReportsCachedMembers(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newCached(&scripted{name: "ipmi"}, time.Second, time.Second, func() time.Time { return now }, false)
	c.fold([]Reading{{Zone: ZonePlatform, Socket: -1, Watts: 250}}, nil, now)
	now = now.Add(4 * time.Second)
	c.fold(nil, errors.New("BMC busy"), now)
	rapl := &fixedMeter{name: "rapl", samples: []ZoneSample{{Zone: ZonePackage, Socket: 0, Joules: 10}}}

	h := Combine(rapl, c).Health()
	if len(h) != 1 {
		t.Fatalf("health of %d sources, want 1 (the cached ipmi meter): %+v", len(h), h)
	}
	got := h[0]
	if got.Source != "ipmi" || got.Up || got.Age != 4*time.Second || got.Reads != 2 || got.Errors != 1 {
		t.Errorf("health %+v, want ipmi down, age 4s, 2 reads, 1 error", got)
	}
}
