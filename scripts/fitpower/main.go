// Command fitpower fits the estimator's whole-server power curves
// (pkg/power/curves/fit.json) on SPECpower_ssj2008 results and prints
// their accuracy on the held-out split next to the linear model they
// replaced:
//
//	go run ./scripts/fitpower -data ../shared/fixtures/specpower/results.csv -out pkg/power/curves/fit.json
//
// The data set is not part of the repository: it is
// green-coding-berlin/spec-power-model's collection of SPEC's published
// results (AGPL-3.0; SPEC's fair-use rules apply to the results). Only the
// fitted coefficients are committed. Without -out it only evaluates the
// committed fit.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"

	"github.com/wattrace/wattrace/pkg/power/curves"
)

const (
	source  = "SPECpower_ssj2008 results published by SPEC (https://www.spec.org/power_ssj2008/results/), as collected and cleaned by green-coding-berlin/spec-power-model (data/spec_data_cleaned_unmelted.csv, data/spec_data.csv); fitted by scripts/fitpower"
	license = "data set AGPL-3.0 (green-coding-berlin/spec-power-model), not redistributed here; SPEC fair-use rules apply to the results; the fitted coefficients are wattrace's"
)

func main() {
	data := flag.String("data", "../shared/fixtures/specpower/results.csv", "SPECpower results (CSV)")
	out := flag.String("out", "", "write the fit here (JSON); empty: evaluate the built-in fit only")
	flag.Float64Var(&curves.DefaultOptions.Lambda, "lambda", curves.DefaultOptions.Lambda, "ridge penalty")
	flag.IntVar(&curves.DefaultOptions.MinGroup, "min-group", curves.DefaultOptions.MinGroup, "results an architecture group needs for its own coefficient")
	flag.Float64Var(&curves.DefaultOptions.Shrink, "shrink", curves.DefaultOptions.Shrink, "pseudo-count shrinking per-CPU offsets (0: none)")
	flag.Float64Var(&curves.DefaultOptions.ConfigShrink, "config-shrink", curves.DefaultOptions.ConfigShrink, "pseudo-count shrinking per-configuration offsets (0: none)")
	flag.Float64Var(&curves.DefaultOptions.FamilyShrink, "family-shrink", curves.DefaultOptions.FamilyShrink, "pseudo-count shrinking the arch tier's per-family offsets (0: none)")
	flag.BoolVar(&curves.DefaultOptions.CPUWeight, "cpu-weight", curves.DefaultOptions.CPUWeight, "weigh the arch and generic tiers' results by 1/(results of the same CPU)")
	flag.BoolVar(&curves.DefaultOptions.Huber, "huber", curves.DefaultOptions.Huber, "robust (Huber) regression")
	extra := flag.String("extra", "", "comma-separated extra features (experiments)")
	cv := flag.Bool("cv", false, "only cross-validate the whole procedure on the fitted split (5 folds) and print it; the held-out split is not scored")
	flag.Parse()
	if *extra != "" {
		curves.DefaultOptions.Extra = strings.Split(*extra, ",")
	}
	if err := run(*data, *out, *cv, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fitpower:", err)
		os.Exit(1)
	}
}

func run(data, out string, cv bool, w io.Writer) error {
	f, err := os.Open(data)
	if err != nil {
		return err
	}
	defer f.Close()
	all, skipped, why, err := curves.ReadResults(f)
	if err != nil {
		return fmt.Errorf("%s: %w", data, err)
	}
	train, test := curves.Split(all)
	fmt.Fprintf(w, "%s: %d results (%d skipped: first %v); fitted on %d, held out %d\n", data, len(all), skipped, why, len(train), len(test))
	if cv {
		return crossValidate(w, train)
	}
	model, err := curves.Default()
	if out != "" {
		fit, err := curves.Train(train, curves.DefaultOptions)
		if err != nil {
			return err
		}
		for _, t := range fit.Tiers {
			fmt.Fprintf(w, "tier %s: cross-validated on the fitted split: %s\n", t.Name, cvSummary(t.CV))
		}
		fit.Source, fit.License, fit.Split, fit.HeldOut = source, license, curves.SplitRule, len(test)
		b, err := json.MarshalIndent(fit, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return err
		}
		archs, err := os.ReadFile("pkg/power/curves/archs.json")
		if err != nil {
			return err
		}
		if model, err = curves.New(b, archs); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return report(w, model, test)
}

// report prints the held-out accuracy of the curves and of the linear
// model, overall and by tier.
func report(w io.Writer, m *curves.Model, test []curves.Result) error {
	node := func(r curves.Result) curves.Node {
		return curves.Node{CPU: r.CPU, Sockets: r.Sockets, Threads: r.Threads, MemoryGiB: r.MemoryGiB}
	}
	curve := func(r curves.Result, l int) (curves.Estimate, error) {
		c, err := m.Server(node(r))
		return c.Points[l], err
	}
	noMem := func(r curves.Result, l int) (curves.Estimate, error) {
		n := node(r)
		n.MemoryGiB = 0
		c, err := m.Server(n)
		return c.Points[l], err
	}
	linear := func(r curves.Result, l int) (curves.Estimate, error) {
		return curves.Estimate{Watts: m.Linear(node(r), curves.Levels[l]/100)}, nil
	}
	fmt.Fprintln(w, "| model | results | cases | unanswered | median abs error | p90 abs error | median bias | in band |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	row := func(name string, rs []curves.Result, p func(curves.Result, int) (curves.Estimate, error)) error {
		if len(rs) == 0 {
			return nil
		}
		a, err := curves.Score(rs, p)
		if err != nil {
			return err
		}
		band := "—"
		if a.InBand == a.InBand {
			band = fmt.Sprintf("%.1f%%", 100*a.InBand)
		}
		fmt.Fprintf(w, "| %s | %d | %d | %d | %.1f%% | %.1f%% | %+.1f%% | %s |\n", name, len(rs), a.Cases, a.Unanswered, 100*a.MedianAbs, 100*a.P90Abs, 100*a.Bias, band)
		return nil
	}
	if err := row("curves (all held out)", test, curve); err != nil {
		return err
	}
	if err := row("curves, memory not given", test, noMem); err != nil {
		return err
	}
	byTier := map[string][]curves.Result{}
	for _, r := range test {
		c, err := m.Server(node(r))
		if err != nil {
			return err
		}
		byTier[c.Info.Tier] = append(byTier[c.Info.Tier], r)
	}
	for _, t := range []string{curves.TierCPU, curves.TierArch, curves.TierGeneric} {
		if err := row("curves, "+t+" tier", byTier[t], curve); err != nil {
			return err
		}
	}
	if err := row("linear per-vCPU (replaced)", test, linear); err != nil {
		return err
	}
	segments(w, "held out", curves.BySegment(curves.Predict(test, curve)))
	return nil
}

// segments prints the accuracy by load band, sockets and memory per core.
func segments(w io.Writer, what string, segs []curves.SegmentAccuracy) {
	fmt.Fprintf(w, "\n| %s, by segment | | results | cases | unanswered | median abs error | p90 abs error | median bias | in band |\n", what)
	fmt.Fprintln(w, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for _, s := range segs {
		fmt.Fprintf(w, "| %s | %s | %d | %d | %d | %.1f%% | %.1f%% | %+.1f%% | %.1f%% |\n", s.Axis, s.Name, s.Results, s.Cases, s.Unanswered, 100*s.MedianAbs, 100*s.P90Abs, 100*s.Bias, 100*s.InBand)
	}
	fmt.Fprintln(w)
}

// cvSummary is the median and p90 of |exp(residual) − 1|, the relative
// error of a log-space residual.
func cvSummary(res []float64) string {
	abs := make([]float64, len(res))
	for i, r := range res {
		abs[i] = math.Abs(math.Exp(-r) - 1)
	}
	sort.Float64s(abs)
	if len(abs) == 0 {
		return "no residuals"
	}
	return fmt.Sprintf("median %.1f%%, p90 %.1f%% (%d cases)", 100*abs[len(abs)/2], 100*abs[len(abs)*9/10], len(abs))
}

// crossValidate prints the 5-fold cross-validation of the whole procedure
// on the fitted split: the figures every modelling choice is made on.
func crossValidate(w io.Writer, train []curves.Result) error {
	rep, err := curves.CrossValidate(train, curves.DefaultOptions, 5)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "options %+v\n", curves.DefaultOptions)
	fmt.Fprintln(w, "| cross-validated (fitted split, 5 folds) | cases | unanswered | median abs error | p90 abs error | median bias | in band |")
	fmt.Fprintln(w, "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
	row := func(name string, a curves.Accuracy) {
		fmt.Fprintf(w, "| %s | %d | %d | %.1f%% | %.1f%% | %+.1f%% | %.1f%% |\n", name, a.Cases, a.Unanswered, 100*a.MedianAbs, 100*a.P90Abs, 100*a.Bias, 100*a.InBand)
	}
	row("all", rep.All)
	for l, a := range rep.ByLevel {
		fmt.Fprintf(w, "level %3.0f%%: median %.1f%%, p90 %.1f%%\n", curves.Levels[l], 100*a.MedianAbs, 100*a.P90Abs)
	}
	segments(w, "cross-validated", rep.Segments)
	for _, s := range rep.Worst {
		fmt.Fprintln(w, "worst:", s)
	}
	for _, t := range []string{curves.TierCPU, curves.TierArch, curves.TierGeneric} {
		if a, ok := rep.ByTier[t]; ok {
			row(t+" tier", a)
		}
	}
	return nil
}
