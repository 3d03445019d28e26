package measure

import (
	"math"

	"gonum.org/v1/gonum/stat"
	"gonum.org/v1/gonum/stat/distuv"
)

// Stat is one quantity over the runs: mean, sample standard deviation and
// the 95% confidence interval of the mean (Student's t with n-1 degrees
// of freedom). With one run the deviation and interval are absent.
type Stat struct {
	N      int         `json:"n"`
	Mean   float64     `json:"mean"`
	StdDev *float64    `json:"stddev,omitempty"`
	CI95   *[2]float64 `json:"ci95,omitempty"`
}

// Summarize computes a Stat of xs.
func Summarize(xs []float64) Stat {
	s := Stat{N: len(xs)}
	if len(xs) == 0 {
		return s
	}
	s.Mean = stat.Mean(xs, nil)
	if len(xs) < 2 {
		return s
	}
	sd := stat.StdDev(xs, nil) // n-1 in the denominator
	s.StdDev = &sd
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(len(xs) - 1)}.Quantile(0.975)
	h := t * sd / math.Sqrt(float64(len(xs)))
	s.CI95 = &[2]float64{s.Mean - h, s.Mean + h}
	return s
}

// Summary is the statistics over the runs that completed (an interrupted
// run is left out).
type Summary struct {
	Runs        int  `json:"runs"`
	Interrupted bool `json:"interrupted"`
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
}

func summarize(runs []Run) Summary {
	var s Summary
	var wall, cpu, e, dyn, idle, node, w, g []float64
	for _, r := range runs {
		if s.ExitStatus == 0 {
			s.ExitStatus = r.ExitStatus
		}
		if r.Interrupted {
			s.Interrupted = true
			continue
		}
		s.Runs++
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
	return s
}
