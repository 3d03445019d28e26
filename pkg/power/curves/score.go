package curves

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"gonum.org/v1/gonum/stat"
)

// Case is one comparison of a prediction with a measurement: a result at
// one load level. Err is set when the predictor gave no answer (an error,
// or watts or a band that are not finite and positive).
type Case struct {
	Result   Result
	Level    int // index into Levels
	Estimate Estimate
	Err      error
}

// Answered tells whether the case has a usable prediction.
func (c Case) Answered() bool { return c.Err == nil }

// Predict runs predict on every level of every result. A predictor error
// or an unusable estimate is kept in the case, not returned: scoring
// counts it as unanswered rather than dropping it or stopping.
func Predict(results []Result, predict func(r Result, l int) (Estimate, error)) []Case {
	out := make([]Case, 0, len(results)*NumLevels)
	for _, r := range results {
		for l := 0; l < NumLevels; l++ {
			e, err := predict(r, l)
			if err == nil {
				err = e.check()
			}
			out = append(out, Case{Result: r, Level: l, Estimate: e, Err: err})
		}
	}
	return out
}

// check rejects an estimate no reader should get: watts not finite and
// positive, or a band (when there is one) that is not finite or does not
// hold the watts.
func (e Estimate) check() error {
	if !finite(e.Watts) || e.Watts <= 0 {
		return fmt.Errorf("estimate %v W", e.Watts)
	}
	if e.Lower == 0 && e.Upper == 0 {
		return nil // a predictor without a band
	}
	if !finite(e.Lower) || !finite(e.Upper) || e.Lower < 0 || e.Lower > e.Watts || e.Upper < e.Watts {
		return fmt.Errorf("band [%v, %v] W around %v W", e.Lower, e.Upper, e.Watts)
	}
	return nil
}

// Accuracy is how a predictor did on a set of cases.
type Accuracy struct {
	// Cases counts every case, answered or not; Unanswered those
	// without a usable prediction.
	Cases, Unanswered int
	// MedianAbs and P90Abs are quantiles of |predicted − measured| /
	// measured over the answered cases.
	MedianAbs, P90Abs float64
	// Bias is the median of (predicted − measured) / measured.
	Bias float64
	// InBand is the fraction of all cases (an unanswered one counts as
	// outside) whose measured value lies in the band; NaN for a predictor
	// without one.
	InBand float64
}

// Summarise scores cases; the zero Accuracy with NaN figures when none
// was answered.
func Summarise(cases []Case) Accuracy {
	var abs, rel []float64
	in, banded := 0, false
	a := Accuracy{Cases: len(cases), MedianAbs: math.NaN(), P90Abs: math.NaN(), Bias: math.NaN(), InBand: math.NaN()}
	for _, c := range cases {
		if !c.Answered() {
			a.Unanswered++
			continue
		}
		m := c.Result.Watts[c.Level]
		rel = append(rel, (c.Estimate.Watts-m)/m)
		abs = append(abs, math.Abs(c.Estimate.Watts-m)/m)
		if c.Estimate.Upper > 0 {
			banded = true
			if c.Estimate.Lower <= m && m <= c.Estimate.Upper {
				in++
			}
		}
	}
	if len(abs) == 0 {
		return a
	}
	sort.Float64s(abs)
	sort.Float64s(rel)
	a.MedianAbs = stat.Quantile(0.5, stat.Empirical, abs, nil)
	a.P90Abs = stat.Quantile(0.9, stat.Empirical, abs, nil)
	a.Bias = stat.Quantile(0.5, stat.Empirical, rel, nil)
	if banded {
		a.InBand = float64(in) / float64(len(cases))
	}
	return a
}

// Score compares predictions with the measured values over every level of
// every result. predict returns the estimate for a result at level index
// l; a predictor without a band returns Lower = Upper = 0. A case the
// predictor cannot answer is counted in Unanswered; the error is only for
// no results at all.
func Score(results []Result, predict func(r Result, l int) (Estimate, error)) (Accuracy, error) {
	if len(results) == 0 {
		return Accuracy{}, errors.New("no results to score")
	}
	return Summarise(Predict(results, predict)), nil
}

// Segment is a named part of the cases along one axis (load band,
// sockets, memory per core), to see where the misses sit.
type Segment struct {
	Axis, Name string
	Keep       func(Case) bool
}

// MemoryPerCore is a result's installed memory per physical core (per
// hardware thread when its cores are not known).
func (r Result) MemoryPerCore() float64 {
	cores := r.Cores
	if cores <= 0 {
		cores = r.Threads
	}
	return r.MemoryGiB / float64(cores)
}

// Segments are the parts the accuracy is reported by: the load band
// (active idle, where the power supply is least efficient and idle
// policies differ most; low, middle and high load), the sockets, and the
// memory per core (memory-heavy configurations draw more at every load).
var Segments = []Segment{
	{"load", "active idle", func(c Case) bool { return c.Level == 0 }},
	{"load", "10-30%", func(c Case) bool { return c.Level >= 1 && c.Level <= 3 }},
	{"load", "40-70%", func(c Case) bool { return c.Level >= 4 && c.Level <= 7 }},
	{"load", "80-100%", func(c Case) bool { return c.Level >= 8 }},
	{"sockets", "1", func(c Case) bool { return c.Result.Sockets == 1 }},
	{"sockets", "2", func(c Case) bool { return c.Result.Sockets == 2 }},
	{"sockets", "4 or more", func(c Case) bool { return c.Result.Sockets >= 4 }},
	{"memory per core", "under 2 GiB", func(c Case) bool { return c.Result.MemoryPerCore() < 2 }},
	{"memory per core", "2-4 GiB", func(c Case) bool { m := c.Result.MemoryPerCore(); return m >= 2 && m < 4 }},
	{"memory per core", "4 GiB or more", func(c Case) bool { return c.Result.MemoryPerCore() >= 4 }},
}

// SegmentAccuracy is Summarise over one segment; Results counts the
// results with a case in it.
type SegmentAccuracy struct {
	Segment
	Results int
	Accuracy
}

// BySegment summarises cases over each of Segments, skipping empty ones.
func BySegment(cases []Case) []SegmentAccuracy {
	var out []SegmentAccuracy
	for _, s := range Segments {
		var keep []Case
		ids := map[string]bool{}
		for _, c := range cases {
			if s.Keep(c) {
				keep = append(keep, c)
				ids[c.Result.ID] = true
			}
		}
		if len(keep) > 0 {
			out = append(out, SegmentAccuracy{Segment: s, Results: len(ids), Accuracy: Summarise(keep)})
		}
	}
	return out
}
