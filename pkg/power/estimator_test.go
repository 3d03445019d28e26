package power

import (
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestEstimator(t *testing.T) *Estimator {
	t.Helper()
	e, err := NewEstimator(Coefficients{MinWattsPerCPU: 1, MaxWattsPerCPU: 3, CPUs: 2, Arch: "test", Source: "unit test"})
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
	if got := mustRead(t, e); !reflect.DeepEqual(got, []ZoneSample{{Zone: "package", Socket: -1}}) {
		t.Fatalf("initial Read = %+v", got)
	}

	// (2*1 + 2*(3-1)*0.5) W * 10 s = 40 J
	e.Advance(0.5, 10*time.Second)
	if got := mustRead(t, e); !reflect.DeepEqual(got, []ZoneSample{{Zone: "package", Socket: -1, Joules: 40}}) {
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
		want float64 // joules over 10 s with min 1, max 3, 2 CPUs
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
	tests := []struct {
		c    Coefficients
		want string
	}{
		{Coefficients{MinWattsPerCPU: -1, MaxWattsPerCPU: 3, CPUs: 2}, "MinWattsPerCPU must be a finite value in [0, 1000], got -1"},
		{Coefficients{MinWattsPerCPU: math.NaN(), MaxWattsPerCPU: 3, CPUs: 2}, "MinWattsPerCPU"},
		{Coefficients{MinWattsPerCPU: 2, MaxWattsPerCPU: 1, CPUs: 2}, "MaxWattsPerCPU must be finite, >= MinWattsPerCPU (2) and <= 1000, got 1"},
		{Coefficients{MinWattsPerCPU: 1, MaxWattsPerCPU: math.Inf(1), CPUs: 2}, "MaxWattsPerCPU"},
		{Coefficients{MinWattsPerCPU: 1, MaxWattsPerCPU: 1e308, CPUs: 2}, "MaxWattsPerCPU"},
		{Coefficients{MinWattsPerCPU: 1e308, MaxWattsPerCPU: 1e308, CPUs: 2}, "MinWattsPerCPU"},
		{Coefficients{MinWattsPerCPU: 1, MaxWattsPerCPU: 3, CPUs: 0}, "CPUs must be > 0, got 0"},
		{Coefficients{MinWattsPerCPU: 1, MaxWattsPerCPU: 3, CPUs: -4}, "CPUs must be > 0, got -4"},
	}
	for _, tc := range tests {
		e, err := NewEstimator(tc.c)
		if err == nil {
			t.Errorf("NewEstimator(%+v) = %v, want error", tc.c, e)
			continue
		}
		if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "invalid estimator coefficients") {
			t.Errorf("NewEstimator(%+v) error %q, want it to contain %q", tc.c, err, tc.want)
		}
	}

	// Equal min and max (a flat model) and zero idle power are valid.
	c := Coefficients{MinWattsPerCPU: 0, MaxWattsPerCPU: 0, CPUs: 1, Arch: "flat", Source: "s"}
	e, err := NewEstimator(c)
	if err != nil {
		t.Fatalf("flat coefficients rejected: %v", err)
	}
	if e.Coefficients() != c {
		t.Fatalf("Coefficients() = %+v, want %+v", e.Coefficients(), c)
	}
}
