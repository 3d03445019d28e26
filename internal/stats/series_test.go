package stats

import (
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// A zone whose source and method change mid-run (a host's share, then the
// estimator standing in, then the host again) counts each series from
// zero: the old series stops where it was, the measured series never holds
// an estimated joule, and the series of the zone sum to the energy read.
func TestZoneSeriesPerSourceAndMethod(t *testing.T) {
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: -1, Joules: 500, Source: "host:hv1", Method: reading.MethodMeasured}}}
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	l := mustLoop(t, Config{CPUs: 2}, src, m, names{1: "/a"})
	now := time.Unix(1000, 0)
	l.Step(now)
	// Each step: the joules the meter's cumulative reading grows by, and
	// the labels it carries.
	steps := []struct {
		j              float64
		source, method string
	}{
		{10, "host:hv1", reading.MethodMeasured},
		{20, "host:hv1", reading.MethodMeasured},
		{7, "estimator", reading.MethodEstimated},
		{8, "estimator", reading.MethodEstimated},
		{0, "host:hv1", reading.MethodMeasured}, // the host back: a fresh baseline
		{30, "host:hv1", reading.MethodMeasured},
		{4, "host:hv1", reading.MethodEstimated}, // the host estimates this zone now
	}
	var read float64
	for _, st := range steps {
		now = now.Add(time.Second)
		src.add(1, 100, 0, 3e8)
		m.samples[0].Joules += st.j
		m.samples[0].Source, m.samples[0].Method = st.source, st.method
		read += st.j
		l.Step(now)
	}
	type series struct {
		source    string
		estimated bool
	}
	want := map[series]float64{{"host:hv1", false}: 60, {"estimator", true}: 15, {"host:hv1", true}: 4}
	s := l.Snapshot()
	var sum float64
	got := map[series]float64{}
	for i := range s.Zones {
		z := &s.Zones[i]
		if z.Name != "package" {
			continue
		}
		k := series{z.Source, z.Estimated}
		if _, dup := got[k]; dup {
			t.Errorf("series %+v published twice", k)
		}
		got[k] = z.EnergyJ
		sum += z.EnergyJ
		// Only the current series draws power (4 J in the last second);
		// those the zone left show 0 W, not their last interval's.
		if want := map[series]float64{{"host:hv1", true}: 4}[k]; z.PowerW != want {
			t.Errorf("series %+v: %v W, want %v", k, z.PowerW, want)
		}
		if math.Abs(z.IdleJ+z.DynamicJ-z.EnergyJ) > 1e-9 {
			t.Errorf("series %+v: idle %v + dynamic %v != %v", k, z.IdleJ, z.DynamicJ, z.EnergyJ)
		}
	}
	for k, w := range want {
		if math.Abs(got[k]-w) > 1e-9 {
			t.Errorf("series %s/%v: %v J, want %v", k.source, k.estimated, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d package series, want %d: %v", len(got), len(want), got)
	}
	if math.Abs(sum-read) > 1e-9 {
		t.Errorf("package series sum to %v J, the meter read %v J", sum, read)
	}
	if z := s.Zones[0]; z.Source != "host:hv1" || !z.Estimated {
		t.Errorf("first published package series %s estimated %v, want the current one (host:hv1, estimated)", z.Source, z.Estimated)
	}
}
