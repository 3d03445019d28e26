package power

import (
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/reading"
)

func newTestEstimator(t *testing.T) *Estimator {
	t.Helper()
	e, err := NewEstimator(LinearZone(reading.ZonePackage, 2, 6))
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestEstimatorAdvance(t *testing.T) {
	e := newTestEstimator(t)
	if e.Name() != "estimator" || !e.Estimated() {
		t.Fatalf("Name/Estimated = %q/%v, want estimator/true", e.Name(), e.Estimated())
	}
	if got := mustRead(t, e); !reflect.DeepEqual(got, []reading.ZoneSample{{Zone: "package", Socket: -1}}) {
		t.Fatalf("initial Read = %+v", got)
	}

	// (2 + (6-2)*0.5) W * 10 s = 40 J
	e.Advance(0.5, 10*time.Second)
	if got := mustRead(t, e); !reflect.DeepEqual(got, []reading.ZoneSample{{Zone: "package", Socket: -1, Joules: 40}}) {
		t.Fatalf("after Advance(0.5, 10s): %+v, want 40 J", got)
	}

	// Idle: 2 W for 500 ms = 1 J; full load: 6 W for 250 ms = 1.5 J.
	e.Advance(0, 500*time.Millisecond)
	e.Advance(1, 250*time.Millisecond)
	if got := joulesOf(t, mustRead(t, e), "package", -1); got != 42.5 {
		t.Fatalf("cumulative = %v J, want 42.5", got)
	}
}

func TestEstimatorClampsUtil(t *testing.T) {
	tests := []struct {
		util float64
		want float64 // joules over 10 s from 2 W idle to 6 W at full load
	}{
		{-0.3, 20},
		{math.Inf(-1), 20},
		{math.NaN(), 20},
		{0.25, 30},
		{1.7, 60},
		{math.Inf(1), 60},
	}
	for _, tc := range tests {
		e := newTestEstimator(t)
		e.Advance(tc.util, 10*time.Second)
		if got := joulesOf(t, mustRead(t, e), "package", -1); got != tc.want {
			t.Errorf("Advance(%v, 10s) = %v J, want %v", tc.util, got, tc.want)
		}
	}

	e := newTestEstimator(t)
	e.Advance(1, 0)
	e.Advance(1, -time.Second)
	if got := joulesOf(t, mustRead(t, e), "package", -1); got != 0 {
		t.Errorf("non-positive dt added %v J", got)
	}
}

func TestEstimatorConcurrent(t *testing.T) {
	e := newTestEstimator(t)
	const workers, steps = 8, 1000
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range steps {
				e.Advance(1, time.Millisecond) // 6 W * 1 ms = 6 mJ
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	last := 0.0
	for reading := true; reading; {
		select {
		case <-done:
			reading = false
		default:
		}
		j := joulesOf(t, mustRead(t, e), "package", -1)
		if j < last {
			t.Fatalf("energy decreased: %v -> %v", last, j)
		}
		last = j
	}
	if got, want := joulesOf(t, mustRead(t, e), "package", -1), 48.0; math.Abs(got-want) > 1e-9 {
		t.Fatalf("total = %v J, want %v", got, want)
	}
}

func TestNewEstimatorValidates(t *testing.T) {
	good := LinearZone(reading.ZonePackage, 2, 6)
	falling := LinearZone(reading.ZonePackage, 6, 2)
	nan := LinearZone(reading.ZonePackage, 2, 6)
	nan.Curve.Points[3].Watts = math.NaN()
	huge := LinearZone(reading.ZonePlatform, 2, 1e6)
	badBand := LinearZone(reading.ZonePackage, 2, 6)
	badBand.Curve.Points[5].Upper = 1
	noName := LinearZone("", 2, 6)
	tests := []struct {
		zones []EstimatedZone
		want  string
	}{
		{nil, "estimator without zones"},
		{[]EstimatedZone{falling}, "zone package: power falls from 6 W to 5.6 W at 10% load"},
		{[]EstimatedZone{nan}, "zone package at 30%: NaN W is not a power"},
		{[]EstimatedZone{huge}, "zone platform at 10%: 100001.8 W is not a power in [0, 20000]"},
		{[]EstimatedZone{badBand}, "zone package at 50%: band [4, 1] does not hold 4 W"},
		{[]EstimatedZone{noName}, "zone has no name"},
		{[]EstimatedZone{good, good}, "zone package given twice"},
	}
	for _, tc := range tests {
		e, err := NewEstimator(tc.zones...)
		if err == nil {
			t.Errorf("NewEstimator(%d zones) = %v, want error %q", len(tc.zones), e, tc.want)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewEstimator error %q, want it to contain %q", err, tc.want)
		}
	}

	// A flat model with zero idle power is valid.
	if _, err := NewEstimator(LinearZone(reading.ZonePackage, 0, 0)); err != nil {
		t.Fatalf("flat zero curve rejected: %v", err)
	}
}

// TestEstimatorCurvesAndBands: two zones from the fitted model (a
// whole-server and a package curve) integrate along their own concave
// curves, and Estimates reports the last interval's power with its band.
func TestEstimatorCurvesAndBands(t *testing.T) {
	m, err := curves.Default()
	if err != nil {
		t.Fatal(err)
	}
	n := curves.Node{CPU: "Intel(R) Xeon(R) Platinum 8180 CPU @ 2.50GHz", Sockets: 2, Threads: 112, MemoryGiB: 192}
	server, err := m.Server(n)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := m.Package(n)
	if err != nil {
		t.Fatal(err)
	}
	e, err := NewEstimator(EstimatedZone{reading.ZonePlatform, server}, EstimatedZone{reading.ZonePackage, pkg})
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := e.IdleWatts(reading.ZonePlatform); !ok || w != server.Points[0].Watts {
		t.Fatalf("IdleWatts(platform) = %v, %v; want %v", w, ok, server.Points[0].Watts)
	}
	e.Advance(0.3, 10*time.Second)
	got := mustRead(t, e)
	if p := joulesOf(t, got, reading.ZonePlatform, -1); math.Abs(p-10*server.Points[3].Watts) > 1e-9 {
		t.Errorf("platform after 10 s at 30%% = %v J, want %v", p, 10*server.Points[3].Watts)
	}
	// 2 x 205 W TDP x Teads' ratio at 30% (0.32 + (0.75-0.32)*20/40 = 0.535).
	if p := joulesOf(t, got, reading.ZonePackage, -1); math.Abs(p-10*410*0.535) > 1e-6 {
		t.Errorf("package after 10 s at 30%% = %v J, want %v", p, 10*410*0.535)
	}
	est := e.Estimates()
	if len(est) != 2 || est[0].Name != reading.ZonePlatform || est[0].Socket != -1 || est[0].Source != "estimator" {
		t.Fatalf("Estimates = %+v", est)
	}
	s := est[0]
	if s.Watts != server.Points[3].Watts || !(s.LowerW < s.Watts && s.Watts < s.UpperW) {
		t.Errorf("platform estimate %v W in [%v, %v], want %v inside a band", s.Watts, s.LowerW, s.UpperW, server.Points[3].Watts)
	}
	if s.Curve != curves.KindServer || s.Tier != curves.TierCPU || s.Arch != "Skylake" || s.CPU != "xeon platinum 8180" || !strings.Contains(s.Coefficients, "SPECpower") {
		t.Errorf("platform estimate info %+v", s)
	}
}
