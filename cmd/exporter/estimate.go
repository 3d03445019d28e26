package main

import (
	"context"
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
}

func parseEstimateArgs(args []string, stderr io.Writer) (estimateArgs, error) {
	fs := pflag.NewFlagSet("wattrace estimate", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: wattrace estimate --cpu MODEL --sockets N --threads N [--memory-gib M] --load PERCENT")
		fs.PrintDefaults()
	}
	var a estimateArgs
	var load string
	fs.StringVar(&a.node.CPU, "cpu", "", "CPU model string, as /proc/cpuinfo's \"model name\" (e.g. \"Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\")")
	fs.IntVar(&a.node.Sockets, "sockets", 0, "CPU sockets")
	fs.IntVar(&a.node.Threads, "threads", 0, "hardware threads (vCPUs in a VM) in all")
	fs.Float64Var(&a.node.MemoryGiB, "memory-gib", 0, "installed memory in GiB (0 or absent: assumed from the thread count)")
	fs.StringVar(&load, "load", "", "CPU utilisation in percent, 0 to 100 (a trailing % is allowed)")
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
	pct, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(load), "%"), 64)
	if err != nil || math.IsNaN(pct) || pct < 0 || pct > 100 {
		return a, fmt.Errorf("--load %q: want a percentage from 0 to 100", load)
	}
	a.load = pct / 100
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
	m, err := curves.Default()
	if err != nil {
		fmt.Fprintln(io.err, "wattrace estimate:", err)
		return 1
	}
	if err := printEstimate(io.out, m, a); err != nil {
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
	server, err := m.Server(a.node)
	if err != nil {
		return err
	}
	pkg, err := m.Package(a.node)
	if err != nil {
		return err
	}
	pkg = curves.CapAt(pkg, server)
	vm, err := m.VM(a.node)
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
	fmt.Fprintf(w, "node:     %d socket(s), %d threads, %s; load %g%%\n", a.node.Sockets, a.node.Threads, mem, a.load*100)
	for _, c := range []struct {
		name  string
		curve curves.Curve
	}{{"server", server}, {"package", pkg}, {"vm", vm}} {
		e := c.curve.At(a.load)
		fmt.Fprintf(w, "%-9s %7.1f W  band %7.1f .. %7.1f W  (%s)\n", c.name+":", e.Watts, e.Lower, e.Upper, c.curve.Info.Source)
	}
	seen := map[string]bool{}
	for _, c := range []curves.Curve{server, pkg, vm} {
		for _, f := range c.Info.Fallbacks {
			if !seen[f] {
				seen[f] = true
				fmt.Fprintf(w, "fallback: %s\n", f)
			}
		}
	}
	return nil
}
