package curves

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"sort"
)

// CVReport is how the whole fitting procedure did on results it did not
// see: every result is predicted by a model trained (table of CPUs,
// groups, offsets, bands and all) on the other folds, through Server, as
// a node would be. Choices are made on it, never on the held-out split.
type CVReport struct {
	All    Accuracy
	ByTier map[string]Accuracy
	// ByLevel is All at each load level.
	ByLevel [NumLevels]Accuracy
	// Worst lists the results with the largest mean absolute error
	// (diagnostics), worst first.
	Worst []string
}

// CrossValidate runs Train folds times, each time leaving out the results
// whose FNV-1a hash of "outer/"+id mod folds is the fold, and scores the
// left-out results through Model.Server.
func CrossValidate(results []Result, opt Options, folds int) (CVReport, error) {
	if folds < 2 {
		return CVReport{}, fmt.Errorf("curves: %d folds", folds)
	}
	fold := func(id string) int {
		h := fnv.New32a()
		_, _ = h.Write([]byte("outer/" + id))
		return int(h.Sum32() % uint32(folds))
	}
	type pred struct {
		r    Result
		tier string
		c    Curve
	}
	var preds []pred
	for k := 0; k < folds; k++ {
		var train, test []Result
		for _, r := range results {
			if fold(r.ID) == k {
				test = append(test, r)
			} else {
				train = append(train, r)
			}
		}
		f, err := Train(train, opt)
		if err != nil {
			return CVReport{}, fmt.Errorf("curves: fold %d: %w", k, err)
		}
		b, err := json.Marshal(f)
		if err != nil {
			return CVReport{}, err
		}
		m, err := New(b, archsJSON)
		if err != nil {
			return CVReport{}, fmt.Errorf("curves: fold %d: %w", k, err)
		}
		for _, r := range test {
			c, err := m.Server(Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB})
			if err != nil {
				return CVReport{}, fmt.Errorf("curves: result %s: %w", r.ID, err)
			}
			preds = append(preds, pred{r, c.Info.Tier, c})
		}
	}
	score := func(keep func(pred) bool) (Accuracy, bool, error) {
		var rs []Result
		curves := map[string]Curve{}
		for _, p := range preds {
			if keep(p) {
				rs = append(rs, p.r)
				curves[p.r.ID] = p.c
			}
		}
		if len(rs) == 0 {
			return Accuracy{}, false, nil
		}
		a, err := Score(rs, func(r Result, l int) (Estimate, error) { return curves[r.ID].Points[l], nil })
		return a, true, err
	}
	rep := CVReport{ByTier: map[string]Accuracy{}}
	var err error
	if rep.All, _, err = score(func(pred) bool { return true }); err != nil {
		return rep, err
	}
	for _, t := range []string{TierCPU, TierArch, TierGeneric} {
		a, ok, err := score(func(p pred) bool { return p.tier == t })
		if err != nil {
			return rep, err
		}
		if ok {
			rep.ByTier[t] = a
		}
	}
	for l := 0; l < NumLevels; l++ {
		var abs []float64
		for _, p := range preds {
			abs = append(abs, math.Abs(p.c.Points[l].Watts-p.r.Watts[l])/p.r.Watts[l])
		}
		sort.Float64s(abs)
		rep.ByLevel[l] = Accuracy{Cases: len(abs), MedianAbs: abs[len(abs)/2], P90Abs: abs[len(abs)*9/10]}
	}
	sort.Slice(preds, func(i, j int) bool { return meanAbs(preds[i].r, preds[i].c) > meanAbs(preds[j].r, preds[j].c) })
	for _, p := range preds[:min(15, len(preds))] {
		rep.Worst = append(rep.Worst, fmt.Sprintf("%s %q %s s=%d t=%d m=%g: mean abs %.0f%%, idle %.0f/%.0f W, full %.0f/%.0f W", p.tier, p.r.CPU, p.r.ID, p.r.Sockets, p.r.Threads, p.r.MemoryGiB, 100*meanAbs(p.r, p.c), p.c.Points[0].Watts, p.r.Watts[0], p.c.Points[NumLevels-1].Watts, p.r.Watts[NumLevels-1]))
	}
	return rep, nil
}

func meanAbs(r Result, c Curve) float64 {
	s := 0.0
	for l := range r.Watts {
		s += math.Abs(c.Points[l].Watts-r.Watts[l]) / r.Watts[l]
	}
	return s / NumLevels
}
