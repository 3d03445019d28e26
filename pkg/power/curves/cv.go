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
	// Segments are All by load band, sockets and memory per core.
	Segments []SegmentAccuracy
	// Worst lists the results with the largest mean absolute error
	// (diagnostics), worst first.
	Worst []string
	// Cases are every prediction, and Tiers the tier each result was
	// predicted by (by id).
	Cases []Case
	Tiers map[string]string
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
	var cases []Case
	tiers := map[string]string{}
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
		cases = append(cases, Predict(test, func(r Result, l int) (Estimate, error) {
			c, err := m.Server(Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB})
			tiers[r.ID] = c.Info.Tier
			return c.Points[l], err
		})...)
	}
	keep := func(ok func(Case) bool) []Case {
		var out []Case
		for _, c := range cases {
			if ok(c) {
				out = append(out, c)
			}
		}
		return out
	}
	rep := CVReport{All: Summarise(cases), ByTier: map[string]Accuracy{}, Cases: cases, Tiers: tiers}
	for _, t := range []string{TierCPU, TierArch, TierGeneric} {
		if cs := keep(func(c Case) bool { return tiers[c.Result.ID] == t }); len(cs) > 0 {
			rep.ByTier[t] = Summarise(cs)
		}
	}
	for l := 0; l < NumLevels; l++ {
		rep.ByLevel[l] = Summarise(keep(func(c Case) bool { return c.Level == l }))
	}
	rep.Segments = BySegment(cases)
	mean := map[string]float64{}
	var ids []string
	for _, c := range cases {
		if _, ok := mean[c.Result.ID]; !ok {
			ids = append(ids, c.Result.ID)
		}
		if c.Answered() {
			mean[c.Result.ID] += math.Abs(c.Estimate.Watts-c.Result.Watts[c.Level]) / c.Result.Watts[c.Level] / NumLevels
		} else {
			mean[c.Result.ID] += math.Inf(1)
		}
	}
	sort.SliceStable(ids, func(i, j int) bool { return mean[ids[i]] > mean[ids[j]] })
	byID := map[string][]Case{}
	for _, c := range cases {
		byID[c.Result.ID] = append(byID[c.Result.ID], c)
	}
	for _, id := range ids[:min(15, len(ids))] {
		cs := byID[id]
		r := cs[0].Result
		rep.Worst = append(rep.Worst, fmt.Sprintf("%s %q %s s=%d t=%d m=%g: mean abs %.0f%%, idle %.0f/%.0f W, full %.0f/%.0f W", tiers[id], r.CPU, id, r.Sockets, r.Threads, r.MemoryGiB, 100*mean[id], cs[0].Estimate.Watts, r.Watts[0], cs[NumLevels-1].Estimate.Watts, r.Watts[NumLevels-1]))
	}
	return rep, nil
}
