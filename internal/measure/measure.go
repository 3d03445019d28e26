package measure

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Schema names the JSON report's version (docs/measure.md).
const Schema = "wattrace.measure/v1"

// Report is everything measure prints.
type Report struct {
	Schema  string   `json:"schema"`
	Command []string `json:"command"`
	// Accounting is "bpf" (exact per-task CPU time of the command's
	// cgroup), "cgroupfs+procfs" (the cgroup's own counter against
	// /proc/stat) or "rusage+procfs" (the child tree's rusage).
	Accounting string `json:"accounting"`
	// BPFPrograms says how the BPF accounting's programs were had:
	// "loaded" (and unloaded at the end), "loaded and kept" (for later
	// measures, --bpf.keep) or "reused" (kept by an earlier one); absent
	// without BPF.
	BPFPrograms string `json:"bpf_programs,omitempty"`
	// CPURead says what each run's BPF reads walk: "cgroup" (the
	// command's cgroup alone, whatever else the node runs) or "node"
	// (every task on the node: the kernel lacks the cgroup read, the
	// node's busy CPU is not to be had as exactly (rootCPUAcct), or the
	// node has several sockets); absent without BPF or without a child
	// cgroup.
	CPURead string `json:"cpu_read,omitempty"`
	// Cgroup is how the command was placed: child, systemd or none.
	Cgroup       string   `json:"cgroup"`
	Hierarchy    string   `json:"hierarchy,omitempty"`
	Meter        string   `json:"meter"`
	IdlePolicy   string   `json:"idle_policy"`
	Baseline     Baseline `json:"idle_baseline"`
	GramsPerKWh  float64  `json:"grams_per_kwh"`
	CarbonSource string   `json:"carbon_source"`
	Runs         []Run    `json:"runs"`
	Summary      Summary  `json:"summary"`
	// SelfCPUSeconds is measure's own CPU time (its process, set-up
	// included; not the command's), for its overhead.
	SelfCPUSeconds float64  `json:"self_cpu_seconds"`
	Warnings       []string `json:"warnings,omitempty"`
}

// Report.CPURead's values.
const (
	ReadCgroup = "cgroup"
	ReadNode   = "node"
)

var errInterrupted = errors.New("interrupted")

// Measure runs the command o.Repeat times (after the idle baseline when
// o.Idle is set) and returns the report. An interrupt ends it after the
// run under way, whose record is kept and marked.
func Measure(ctx context.Context, o Options, e *Env, path string, rep Report) (Report, error) {
	rep.Schema = Schema
	rep.Command = o.Command
	rep.IdlePolicy = string(o.IdlePolicy)
	rep.Meter = e.Meter.Name()
	a := &attribution{meter: e.Meter, policy: o.IdlePolicy, gramsPerKWh: rep.GramsPerKWh, nsockets: e.NSockets}
	if o.Idle > 0 {
		b, err := e.baseline(ctx, o.Idle, func(d time.Duration) bool { return e.sleep(ctx, d) })
		if errors.Is(err, errInterrupted) {
			return e.interrupted(rep, "during the idle baseline"), nil
		}
		if err != nil {
			return rep, err
		}
		a.baseline = b
	} else {
		a.baseline = modelBaseline(ctx, e.Meter)
	}
	rep.Baseline = a.baseline
	for i := 1; i <= o.Warmup; i++ {
		if e.interruptPending() {
			return e.interrupted(rep, fmt.Sprintf("before warm-up run %d of %d", i, o.Warmup)), nil
		}
		r, err := e.runOnce(ctx, path, o.Command)
		rep.Warnings = append(rep.Warnings, r.warnings...)
		if err != nil {
			return rep, err
		}
		if r.interrupted {
			e.stopSig = r.stopSig
			return e.interrupted(rep, fmt.Sprintf("during warm-up run %d of %d", i, o.Warmup)), nil
		}
		if r.exit != 0 {
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("warm-up run %d exited with status %d", i, r.exit))
		}
	}
	for i := 1; i <= o.Repeat; i++ {
		if e.interruptPending() {
			// Before a run (during the set-up, or between two runs):
			// start no more.
			if len(rep.Runs) == 0 {
				return e.interrupted(rep, "before the first run"), nil
			}
			rep.Summary = summarize(rep.Runs)
			rep.Summary.Interrupted = true
			rep.Warnings = append(rep.Warnings, fmt.Sprintf("interrupted after run %d of %d", i-1, o.Repeat))
			return rep, nil
		}
		r, err := e.runOnce(ctx, path, o.Command)
		rep.Warnings = append(rep.Warnings, r.warnings...)
		if err != nil {
			rep.Summary = summarize(rep.Runs)
			return rep, err
		}
		run, err := a.run(i, r)
		if err != nil {
			rep.Summary = summarize(rep.Runs)
			return rep, err
		}
		rep.Runs = append(rep.Runs, run)
		if run.Interrupted {
			break
		}
	}
	rep.Summary = summarize(rep.Runs)
	if out := rep.Summary.OutlierRuns; len(out) > 0 {
		w := fmt.Sprintf("statistical outliers: run %s (wall time or energy more than %.2f median absolute deviations from the median, hyperfine's rule): other work on the node or cold caches", joinInts(out), outlierScore)
		if out[0] == 1 && o.Warmup == 0 {
			w += "; the first run was one: --warmup N runs the command unrecorded first"
		}
		rep.Warnings = append(rep.Warnings, w)
	}
	return rep, nil
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ", ")
}

// interrupted is the report of a measurement stopped before any run was
// recorded (when says when): the command was never measured, so the
// status is the shell's for the signal that stopped measure (128+N), and
// the report says it was measure, not the command, that was stopped.
func (e *Env) interrupted(rep Report, when string) Report {
	rep.Summary = summarize(rep.Runs)
	rep.Summary.Interrupted = true
	rep.Summary.NotMeasured = true
	sig := "an interrupt"
	rep.Summary.ExitStatus = 130
	if s, ok := e.stopSig.(syscall.Signal); ok {
		rep.Summary.ExitStatus = 128 + int(s)
		sig = unix.SignalName(s)
	}
	rep.Warnings = append(rep.Warnings, fmt.Sprintf("measure was stopped by %s %s: the command was not measured", sig, when))
	return rep
}

// interruptPending takes the signals that arrived while no command ran
// (they had nobody to go to) and says whether one was an interrupt.
func (e *Env) interruptPending() bool {
	for {
		select {
		case sig := <-e.Signals:
			if isInterrupt(sig) {
				e.stopSig = sig
				return true
			}
		default:
			return false
		}
	}
}

// sleep waits d unless an interrupt or ctx ends it first (false).
func (e *Env) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		case sig := <-e.Signals:
			if isInterrupt(sig) {
				e.stopSig = sig
				return false
			}
		}
	}
}

// exitCode is measure's status: the command's, or ExitSetup when it
// could not be measured.
func exitCode(rep Report, err error) int {
	var se startError
	switch {
	case errors.As(err, &se):
		return se.code
	case err != nil:
		return ExitSetup
	}
	return rep.Summary.ExitStatus
}

func errLine(err error) string {
	return fmt.Sprintf("wattrace measure: %v", err)
}
