package measure

import (
	"fmt"
	"math"
	"testing"
)

// 1..5: mean 3, sample deviation √2.5, standard error √2.5/√5,
// t(0.975, 4) = 2.776445; min 1, median 3, max 5.
func TestSummarize(t *testing.T) {
	s := Summarize([]float64{5, 1, 4, 2, 3})
	se := math.Sqrt(2.5) / math.Sqrt(5)
	h := 2.7764451051977987 * se
	if s.N != 5 || s.Mean != 3 || math.Abs(*s.StdDev-math.Sqrt(2.5)) > 1e-12 || math.Abs(*s.StdErr-se) > 1e-12 ||
		math.Abs(s.CI95[0]-(3-h)) > 1e-9 || math.Abs(s.CI95[1]-(3+h)) > 1e-9 || s.Min != 1 || s.Median != 3 || s.Max != 5 {
		t.Errorf("got %+v sd %v se %v ci %v", s, *s.StdDev, *s.StdErr, *s.CI95)
	}
	if m := Summarize([]float64{4, 1, 3, 2}).Median; m != 2.5 {
		t.Errorf("median of 1..4 %v, want 2.5", m)
	}
	if one := Summarize([]float64{7}); one.Mean != 7 || one.StdDev != nil || one.StdErr != nil || one.CI95 != nil || one.Min != 7 || one.Max != 7 {
		t.Errorf("one run: %+v, want a mean without deviation", one)
	}
}

// Energies of 0.1 J and 10 J: the interval of the mean, 5.05 ± 62.9 J,
// would start below zero; energy cannot, so it starts at 0. A quantity
// with a negative run keeps its interval.
func TestCINeverBelowZeroForNonNegative(t *testing.T) {
	s := Summarize([]float64{0.1, 10})
	if s.CI95[0] != 0 || math.Abs(s.CI95[1]-(5.05+12.706204736174698*4.95)) > 1e-6 {
		t.Errorf("ci %v", *s.CI95)
	}
	if n := Summarize([]float64{-0.1, 10}); n.CI95[0] >= 0 {
		t.Errorf("signed quantity: ci %v", *n.CI95)
	}
}

// hyperfine's rule: a run more than 10 × 1.4826 median absolute
// deviations from the median is an outlier.
func TestOutliers(t *testing.T) {
	xs := []float64{1.00, 1.01, 0.99, 1.02, 0.98, 1.5}
	// median 1.005, MAD 0.015: 1.5 is 33 MADs away, 1.02 one.
	if got := fmt.Sprint(outliers(xs)); got != "[5]" {
		t.Errorf("outliers %s, want [5]", got)
	}
	if got := outliers([]float64{1, 1.01, 0.99, 1.02}); got != nil {
		t.Errorf("no outlier expected, got %v", got)
	}
	s := summarize([]Run{{Run: 1, WallSeconds: 3}, {Run: 2, WallSeconds: 1}, {Run: 3, WallSeconds: 1.01}, {Run: 4, WallSeconds: 0.99}})
	if fmt.Sprint(s.OutlierRuns) != "[1]" {
		t.Errorf("outlier runs %v, want [1]", s.OutlierRuns)
	}
}

// Units scale to the figure: small commands keep their digits.
func TestUnitsScale(t *testing.T) {
	for _, c := range []struct {
		x    float64
		unit string
		want string
	}{
		{0.0123, "J", "12.30 mJ"}, {1234.5, "J", "1.234 kJ"}, {560.323, "J", "560.3 J"}, {0.0000012, "J", "1.200 µJ"},
		{10.25, "s", "10.25 s"}, {0.0021, "s", "2.100 ms"}, {7200, "s", "7200 s"},
		{0.000001, "g", "1.000 µg"}, {0.067861, "g", "67.86 mg"}, {54.684, "W", "54.68 W"},
		{0, "J", "0 J"}, {999.96, "J", "1000 J"},
	} {
		if got := si(c.x, c.unit); got != c.want {
			t.Errorf("si(%v, %s) = %q, want %q", c.x, c.unit, got, c.want)
		}
	}
}
