package measure

import (
	"math"
	"testing"
)

// 1..5: mean 3, sample deviation √2.5, t(0.975, 4) = 2.776445.
func TestSummarize(t *testing.T) {
	s := Summarize([]float64{1, 2, 3, 4, 5})
	h := 2.7764451051977987 * math.Sqrt(2.5) / math.Sqrt(5)
	if s.N != 5 || s.Mean != 3 || math.Abs(*s.StdDev-math.Sqrt(2.5)) > 1e-12 ||
		math.Abs(s.CI95[0]-(3-h)) > 1e-9 || math.Abs(s.CI95[1]-(3+h)) > 1e-9 {
		t.Errorf("got %+v sd %v ci %v", s, *s.StdDev, *s.CI95)
	}
	if one := Summarize([]float64{7}); one.Mean != 7 || one.StdDev != nil || one.CI95 != nil {
		t.Errorf("one run: %+v, want a mean without deviation", one)
	}
}
