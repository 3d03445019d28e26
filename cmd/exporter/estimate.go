package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/pkg/power/curves"
)

// estimateCommand is `wattrace estimate`: the estimator's prediction for
// hardware described on the command line, so an operator can check the
// model for their machines (and the tests can check the model).
var estimateCommand = command{
	name:    "estimate",
	summary: "print the estimator's power and band for a CPU model, sockets, threads, memory and load",
	run:     runEstimate,
}

type estimateArgs struct {
	node curves.Node
	load float64 // 0..1
	pct  float64 // the load as given, in percent
	// steal is the share of the vCPUs' time the hypervisor stole, 0..1:
	// it changes the vm curve's figures only (docs/vm.md).
	steal float64
	json  bool
	// warnings are said on stderr (and in the JSON): input that was
	// accepted but is likely not what was meant.
	warnings []string
}

func parseEstimateArgs(args []string, stderr io.Writer) (estimateArgs, error) {
	fs := pflag.NewFlagSet("wattrace estimate", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wattrace estimate --cpu MODEL --sockets N --threads N [--memory-gib M] --load PERCENT [--steal PERCENT] [--json]")
		fs.PrintDefaults()
	}
	var a estimateArgs
	var load, steal string
	fs.StringVar(&a.node.CPU, "cpu", "", "CPU model string, as /proc/cpuinfo's \"model name\" (e.g. \"Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\")")
	fs.IntVar(&a.node.Sockets, "sockets", 0, "CPU sockets")
	fs.IntVar(&a.node.Threads, "threads", 0, "hardware threads (vCPUs in a VM) in all")
	fs.Float64Var(&a.node.MemoryGiB, "memory-gib", 0, "installed memory in GiB (0 or absent: assumed from the thread count)")
	fs.StringVar(&load, "load", "", "CPU utilisation in percent, 0 to 100 (a trailing % is allowed; a value between 0 and 1 without it is warned about)")
	fs.StringVar(&steal, "steal", "0", "for the vm figures: the share of the vCPUs' time the hypervisor stole, in percent (/proc/stat's steal over the interval); --load is then the guest's busy time over the whole interval, stolen time included")
	fs.BoolVar(&a.json, "json", false, "print one JSON object (each curve's watts, band and source, the fallbacks taken, the warnings) instead of text")
	if err := fs.Parse(args); err != nil {
		return a, err
	}
	if fs.NArg() > 0 {
		return a, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for _, name := range []string{"cpu", "sockets", "threads", "load"} {
		if !fs.Changed(name) {
			return a, fmt.Errorf("--%s is required", name)
		}
	}
	if strings.TrimSpace(a.node.CPU) == "" {
		return a, errors.New("--cpu is empty: give the CPU model string (grep -m1 'model name' /proc/cpuinfo)")
	}
	num, hasPct := strings.CutSuffix(strings.TrimSpace(load), "%")
	pct, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(pct) || pct < 0 || pct > 100 {
		return a, fmt.Errorf("--load %q: want a percentage from 0 to 100", load)
	}
	if pct > 0 && pct < 1 && !hasPct {
		// Utilisation is as often written as a fraction: 0.5 most
		// likely means half load, which is 50 here. Say so, but keep
		// the documented reading, so scripts' output does not change.
		a.warnings = append(a.warnings, fmt.Sprintf("--load %s is read as %g%%, not %g%%: the load is in percent (0 to 100); write --load %g%% to mean %g%% and silence this", num, pct, pct*100, pct, pct))
	}
	a.load, a.pct = pct/100, pct
	num, _ = strings.CutSuffix(strings.TrimSpace(steal), "%")
	st, err := strconv.ParseFloat(num, 64)
	if err != nil || math.IsNaN(st) || st < 0 || st > 100 {
		return a, fmt.Errorf("--steal %q: want a percentage from 0 to 100", steal)
	}
	if a.pct > 100-st+1e-9 {
		return a, fmt.Errorf("--load %g%% with --steal %g%%: the guest cannot be busy more than the %g%% of the time it had", a.pct, st, 100-st)
	}
	a.steal = st / 100
	if err := a.node.Validate(); err != nil {
		return a, fmt.Errorf("--sockets/--threads/--memory-gib: %w", err)
	}
	return a, nil
}

func runEstimate(_ context.Context, args []string, io stdio) int {
	a, err := parseEstimateArgs(args, io.err)
	if errors.Is(err, pflag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(io.err, "wattrace estimate:", err)
		return 2
	}
	for _, w := range a.warnings {
		fmt.Fprintln(io.err, "wattrace estimate: warning:", w)
	}
	m, err := curves.Default()
	if err != nil {
		fmt.Fprintln(io.err, "wattrace estimate:", err)
		return 1
	}
	show := printEstimate
	if a.json {
		show = printEstimateJSON
	}
	if err := show(io.out, m, a); err != nil {
		fmt.Fprintln(io.err, "wattrace estimate:", err)
		return 1
	}
	return 0
}

// printEstimate writes the three curves' estimates at the load as the
// exporter uses them: the whole server (a bare-metal node's platform
// zone), its CPU packages (the package zone, capped at the server) and
// the node as a VM of as many vCPUs (a VM's package zone).
func printEstimate(w io.Writer, m *curves.Model, a estimateArgs) error {
	server, pkg, vm, err := estimateCurves(m, a)
	if err != nil {
		return err
	}
	in := server.Info
	arch := in.Arch
	if arch == "" {
		arch = "not recognised"
	}
	mem := "memory unknown"
	if a.node.MemoryGiB > 0 {
		mem = fmt.Sprintf("%g GiB", a.node.MemoryGiB)
	}
	fmt.Fprintf(w, "cpu:      %q (microarchitecture: %s; model tier: %s)\n", in.CPU, arch, in.Tier)
	steal := ""
	if a.steal > 0 {
		steal = fmt.Sprintf(", %g%% stolen (vm)", a.steal*100)
	}
	fmt.Fprintf(w, "node:     %d socket(s), %d threads, %s; load %g%%%s\n", a.node.Sockets, a.node.Threads, mem, a.load*100, steal)
	for _, c := range []struct {
		name  string
		curve curves.Curve
	}{{"server", server}, {"package", pkg}, {"vm", vm}} {
		e := c.curve.At(a.load)
		if c.name == "vm" {
			e = c.curve.AtStolen(a.load, a.steal)
		}
		fmt.Fprintf(w, "%-9s %7.1f W  band %7.1f .. %7.1f W  (%s)\n", c.name+":", e.Watts, e.Lower, e.Upper, c.curve.Info.Source)
	}
	for _, f := range fallbacks(server, pkg, vm) {
		fmt.Fprintf(w, "fallback: %s\n", f)
	}
	return nil
}

// estimateCurves are the three curves as the exporter uses them, the
// package capped at the server.
func estimateCurves(m *curves.Model, a estimateArgs) (server, pkg, vm curves.Curve, err error) {
	if server, err = m.Server(a.node); err != nil {
		return
	}
	if pkg, err = m.Package(a.node); err != nil {
		return
	}
	pkg = curves.CapAt(pkg, server)
	vm, err = m.VM(a.node)
	return
}

// fallbacks are the curves' fallbacks, each once, in order.
func fallbacks(cs ...curves.Curve) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, c := range cs {
		for _, f := range c.Info.Fallbacks {
			if !seen[f] {
				seen[f] = true
				out = append(out, f)
			}
		}
	}
	return out
}

// estimateJSON is `wattrace estimate --json`'s output.
type estimateJSON struct {
	CPU               string  `json:"cpu"`
	Microarchitecture string  `json:"microarchitecture"` // "" when not recognised
	Tier              string  `json:"tier"`
	Sockets           int     `json:"sockets"`
	Threads           int     `json:"threads"`
	MemoryGiB         float64 `json:"memory_gib"` // 0: unknown
	LoadPercent       float64 `json:"load_percent"`
	// StealPercent is the stolen share the vm curve's figures allow for.
	StealPercent float64 `json:"steal_percent"`
	// Curves: server (a bare-metal node's platform zone), package (its
	// CPU packages, capped at the server), vm (a VM of as many vCPUs).
	Curves    map[string]curveJSON `json:"curves"`
	Fallbacks []string             `json:"fallbacks"`
	Warnings  []string             `json:"warnings"`
}

type curveJSON struct {
	Watts      float64 `json:"watts"`
	LowerWatts float64 `json:"lower_watts"`
	UpperWatts float64 `json:"upper_watts"`
	Source     string  `json:"source"`
	Tier       string  `json:"tier"`
}

// printEstimateJSON writes what printEstimate writes, as one JSON object.
func printEstimateJSON(w io.Writer, m *curves.Model, a estimateArgs) error {
	server, pkg, vm, err := estimateCurves(m, a)
	if err != nil {
		return err
	}
	out := estimateJSON{CPU: server.Info.CPU, Microarchitecture: server.Info.Arch, Tier: server.Info.Tier,
		Sockets: a.node.Sockets, Threads: a.node.Threads, MemoryGiB: a.node.MemoryGiB, LoadPercent: a.pct, StealPercent: a.steal * 100,
		Curves: map[string]curveJSON{}, Fallbacks: fallbacks(server, pkg, vm), Warnings: append([]string{}, a.warnings...)}
	for name, c := range map[string]curves.Curve{"server": server, "package": pkg, "vm": vm} {
		e := c.At(a.load)
		if name == "vm" {
			e = c.AtStolen(a.load, a.steal)
		}
		for _, v := range []float64{e.Watts, e.Lower, e.Upper} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
				// JSON cannot carry it, and no reader should get it.
				return fmt.Errorf("%s curve at %g%%: invalid estimate %+v", name, a.load*100, e)
			}
		}
		out.Curves[name] = curveJSON{Watts: e.Watts, LowerWatts: e.Lower, UpperWatts: e.Upper, Source: c.Info.Source, Tier: c.Info.Tier}
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
