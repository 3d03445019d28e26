package measure

import (
	"context"
	"math"
	"testing"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

type members []power.Meter

func (m members) Name() string                                       { return "combined" }
func (members) Estimated() bool                                      { return false }
func (members) Read(_ context.Context) ([]reading.ZoneSample, error) { return nil, nil }
func (m members) Meters() []power.Meter                              { return m }

// Each zone's method follows the meter that read it: RAPL measures, the
// host's share is the host's (unless the host estimated), the estimator
// and a stand-in estimator sample estimate.
func TestMethodPerZone(t *testing.T) {
	a := &attribution{meter: members{named{"rapl", false}, named{"host:hv1", false}, named{"host", true}}}
	for source, want := range map[string]string{
		"rapl":      MethodMeasured,
		"host:hv1":  MethodHost,
		"host":      MethodEstimated, // the host said it estimated every zone
		"estimator": MethodEstimated, // standing in for a stale share
	} {
		if got := a.method(source, ""); got != want {
			t.Errorf("%s: %s, want %s", source, got, want)
		}
	}
	// A sample that carries its zone's method (the host measured one
	// zone and estimated another) is what it says, whatever the meter.
	for _, tc := range [][3]string{
		{"host:hv1", "estimated", MethodEstimated},
		{"host:hv1", "measured", MethodHost},
		{"host", "measured", MethodHost},
	} {
		if got := a.method(tc[0], tc[1]); got != tc[2] {
			t.Errorf("%s sample %s: %s, want %s", tc[0], tc[1], got, tc[2])
		}
	}
}

// An estimated zone's band is the model's own, scaled to the command's
// energy; ±30% only where the model gives none.
func TestBandFromTheModel(t *testing.T) {
	a := &attribution{meter: members{named{"estimator", true}}, policy: "none"}
	r := rawRun(10, 5, 10, map[string]float64{"estimator/package": 100, "estimator/dram": 20})
	r.bands = map[string][2]float64{"estimator/package": {0.8, 1.25}}
	run, err := a.run(1, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, z := range run.Zones {
		j := z.DynamicJ + z.IdleJ
		want := [2]float64{0.7 * j, 1.3 * j}
		if z.Zone == "package" {
			want = [2]float64{0.8 * j, 1.25 * j}
		}
		if z.Method != MethodEstimated || z.Band == nil || math.Abs(z.Band[0]-want[0]) > 1e-9 || math.Abs(z.Band[1]-want[1]) > 1e-9 {
			t.Errorf("%s: method %s band %v, want %v", z.Zone, z.Method, z.Band, want)
		}
	}
}
