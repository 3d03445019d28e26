package measure

import (
	"math"
	"sort"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Stat is one quantity over the runs: mean, sample standard deviation
// (σ, n−1 in the denominator), the standard error of the mean (σ/√n: what
// perf stat's "( ± x% )" is), min, median and max, and the 95% confidence
// interval of the mean (Student's t with n−1 degrees of freedom). With
// one run the deviation, error and interval are absent.
type Stat struct {
	N      int      `json:"n"`
	Mean   float64  `json:"mean"`
	StdDev *float64 `json:"stddev,omitempty"`
	StdErr *float64 `json:"stderr,omitempty"`
	Min    float64  `json:"min"`
	Median float64  `json:"median"`
	Max    float64  `json:"max"`
	// CI95's low end is never below 0 for a quantity none of whose runs
	// is negative (time, energy, power, mass cannot be).
	CI95 *[2]float64 `json:"ci95,omitempty"`
}

// Summarize computes a Stat of xs.
func Summarize(xs []float64) Stat {
	s := Stat{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	s.Mean = stat.Mean(xs, nil)
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	s.Min, s.Max, s.Median = sorted[0], sorted[len(sorted)-1], median(sorted)
	if len(xs) < 2 {
		return s
	}
	sd := stat.StdDev(xs, nil) // n-1 in the denominator
	se := sd / math.Sqrt(float64(len(xs)))
	s.StdDev, s.StdErr = &sd, &se
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(xs) - 1)}.Quantile(0.975)
	lo, hi := s.Mean-t*se, s.Mean+t*se
	if s.Min >= 0 {
		lo = max(lo, 0)
	}
	s.CI95 = &[2]float64{lo, hi}
	return s
}

// median of sorted values.
func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// outlierScore is hyperfine's threshold for its outlier warning: a
// modified Z-score, (x − median) / MAD, above 10 × 1.4826 (ten standard
// deviations, were the runs normal).
const outlierScore = 10 * 1.4826

// outliers returns the indices of xs whose modified Z-score exceeds
// outlierScore; none with fewer than three values.
func outliers(xs []float64) []int {
	if len(xs) < 3 {
		return nil
	}
	sorted := append([]float64(nil), xs...)
	sort.Float64s(sorted)
	med := median(sorted)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - med)
	}
	sort.Float64s(dev)
	mad := median(dev)
	if mad == 0 {
		mad = math.SmallestNonzeroFloat64
	}
	var out []int
	for i, x := range xs {
		if math.Abs(x-med)/mad > outlierScore {
			out = append(out, i)
		}
	}
	return out
}

// Summary is the statistics over the runs that completed (an interrupted
// run is left out; warm-up runs are never in it).
type Summary struct {
	Runs        int  `json:"runs"`
	Interrupted bool `json:"interrupted"`
	// NotMeasured: measure was stopped before the command's first
	// recorded run (ExitStatus is then 128 + the signal that stopped it).
	NotMeasured bool `json:"not_measured,omitempty"`
	// ExitStatus is measure's own: the first non-zero status of a run,
	// else 0.
	ExitStatus  int  `json:"exit_status"`
	WallSeconds Stat `json:"wall_seconds"`
	CPUSeconds  Stat `json:"cpu_seconds"`
	EnergyJ     Stat `json:"energy_joules"`
	DynamicJ    Stat `json:"dynamic_joules"`
	IdleJ       Stat `json:"idle_joules"`
	NodeEnergyJ Stat `json:"node_energy_joules"`
	AverageW    Stat `json:"average_watts"`
	Grams       Stat `json:"grams"`
	// OutlierRuns are the runs (1-based) whose wall time or energy is a
	// statistical outlier (outlierScore); absent when none.
	OutlierRuns []int `json:"outlier_runs,omitempty"`
}

func summarize(runs []Run) Summary {
	var s Summary
	var wall, cpu, e, dyn, idle, node, w, g []float64
	var num []int
	for _, r := range runs {
		if s.ExitStatus == 0 {
			s.ExitStatus = r.ExitStatus
		}
		if r.Interrupted {
			s.Interrupted = true
			continue
		}
		s.Runs++
		num = append(num, r.Run)
		wall = append(wall, r.WallSeconds)
		cpu = append(cpu, r.CPUSeconds)
		e = append(e, r.EnergyJ)
		dyn = append(dyn, r.DynamicJ)
		idle = append(idle, r.IdleJ)
		node = append(node, r.NodeEnergyJ)
		w = append(w, r.AverageW)
		g = append(g, r.Grams)
	}
	s.WallSeconds, s.CPUSeconds = Summarize(wall), Summarize(cpu)
	s.EnergyJ, s.DynamicJ, s.IdleJ = Summarize(e), Summarize(dyn), Summarize(idle)
	s.NodeEnergyJ, s.AverageW, s.Grams = Summarize(node), Summarize(w), Summarize(g)
	out := map[int]bool{}
	for _, xs := range [][]float64{wall, e} {
		for _, i := range outliers(xs) {
			out[num[i]] = true
		}
	}
	for _, n := range num {
		if out[n] {
			s.OutlierRuns = append(s.OutlierRuns, n)
		}
	}
	return s
}
