package measure

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/model"
)

// Exit statuses of measure itself. The command's own status is returned
// as is (128+N when a signal N killed it, as shells do), so measure's own
// failures use the values env(1), timeout(1) and shells use for "the tool
// failed" and "the command could not be run".
const (
	// ExitSetup: the measurement could not be set up or its report not
	// written (meter, accounting or cgroup refused; -o not writable).
	ExitSetup = 124
	// ExitUsage: bad flags, no command, -r 0.
	ExitUsage = 125
	// ExitNotExecutable: the command exists but cannot be executed.
	ExitNotExecutable = 126
	// ExitNotFound: the command is not on PATH or does not exist.
	ExitNotFound = 127
)

// DefaultKeep is --bpf.keep's default: where systemd mounts the BPF file
// system. The package's tests keep nothing unless a test asks.
var DefaultKeep = "/sys/fs/bpf"

// Output formats.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatCSV   = "csv"
)

// Accounting modes (--accounting).
const (
	AcctAuto   = "auto"
	AcctBPF    = "bpf"
	AcctRusage = "rusage"
	// AcctCgroupfs is the kernel's own accounting of the command's
	// cgroup (cpuacct.usage, cpu.stat), what auto falls to when BPF
	// cannot load but a cgroup can be made (a delegated subtree).
	AcctCgroupfs = "cgroupfs"
)

// Cgroup placements (--cgroup).
const (
	PlaceAuto    = "auto"    // systemd scope when systemd runs, else a child cgroup
	PlaceChild   = "child"   // a child of --cgroup.parent (or of the hierarchy's root)
	PlaceSystemd = "systemd" // a transient systemd scope
	PlaceNone    = "none"    // no cgroup: rusage and procfs only
)

// Options are measure's flags.
type Options struct {
	Repeat int
	// Warmup runs the command this many times first, unrecorded (caches,
	// page cache, CPU frequency), as hyperfine's --warmup.
	Warmup int
	// Input is every run's stdin: a file (opened afresh for each run),
	// "null" (/dev/null), or "" (measure's own stdin, which only the
	// first run may find unread).
	Input        string
	Idle         time.Duration
	Format       string
	Output       string
	IdlePolicy   model.IdlePolicy
	Accounting   string
	Cgroup       string
	CgroupParent string
	Hierarchy    string
	SysfsRoot    string
	ProcfsRoot   string
	PowerSource  string
	IPMI         string
	GramsPerKWh  float64
	Country      string
	GPU          string
	// Keep is where the loaded BPF programs are kept for later measures
	// of the same user (a BPF file system); "" loads them each time.
	Keep string
	// Command is what to run: argv[0] as given and its arguments.
	Command []string
}

// usageError is bad input: measure exits with ExitUsage.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// ErrHelp is returned by Parse for -h/--help, after the usage was written.
var ErrHelp = pflag.ErrHelp

// Parse reads measure's flags and the command after them. Flags stop at
// "--" or at the first argument that is not a flag, so the command's own
// flags are never taken for measure's.
func Parse(args []string, help io.Writer) (Options, error) {
	o := Options{}
	fs := pflag.NewFlagSet("measure", pflag.ContinueOnError)
	fs.SetInterspersed(false)
	fs.SetOutput(io.Discard)
	fs.IntVarP(&o.Repeat, "repeat", "r", 1, "Run the command N times and report mean ± standard error of the mean, σ, min, median, max and a 95% confidence interval.")
	fs.IntVar(&o.Warmup, "warmup", 0, "Run the command N times first without recording them (warm caches), as hyperfine does.")
	fs.StringVar(&o.Input, "input", "", "Every run's stdin: FILE (read from its start by each run) or null (/dev/null). Default: measure's stdin, which the first run may consume.")
	idle := fs.Float64("idle", 0, "Measure the node's baseline power for S seconds first and subtract it as idle energy.")
	asJSON := fs.Bool("json", false, "Write the report as JSON (one record per run and a summary; docs/measure.md).")
	asCSV := fs.Bool("csv", false, "Write the report as CSV (one row per run, then summary rows; per-zone figures are in --json only).")
	fs.StringVarP(&o.Output, "output", "o", "", "Write the report to FILE instead of stderr.")
	policy := fs.String("idle-policy", string(model.IdleNone), "The command's share of idle energy: none (kept at node level), cpu (by its CPU share), even (half: the command and the rest of the node).")
	fs.StringVar(&o.Accounting, "accounting", AcctAuto, "CPU accounting: auto (BPF, else the cgroup's own, else rusage), bpf, cgroupfs (the command's cgroup's own counters), rusage (the child tree's rusage); the node's time is /proc/stat's without BPF.")
	fs.StringVar(&o.Cgroup, "cgroup", PlaceAuto, "Where the command runs: auto, child (a child cgroup of --cgroup.parent), systemd (a transient scope), none.")
	fs.StringVar(&o.CgroupParent, "cgroup.parent", "", "A delegated cgroup directory to create the command's cgroup in (default: the hierarchy's root, which needs root).")
	fs.StringVar(&o.Hierarchy, "cgroup.hierarchy", "auto", "The cgroup hierarchy that keys accounting: auto, v2, cpuacct, cpu.")
	fs.StringVar(&o.SysfsRoot, "path.sysfs", "/sys", "sysfs mount point (meters are read below it).")
	fs.StringVar(&o.ProcfsRoot, "path.procfs", "/proc", "procfs mount point.")
	fs.StringVar(&o.PowerSource, "power.source", "auto", "Energy source: auto, rapl, estimator.")
	fs.StringVar(&o.IPMI, "power.ipmi", "off", "Read the BMC through IPMI: auto or off (a BMC's power reading lags seconds behind).")
	fs.StringVar(&o.Keep, "bpf.keep", DefaultKeep, "Keep the loaded BPF programs in this BPF file system for the boot, so later measures of the same user skip the load (docs/measure.md); empty: load and unload them every time.")
	fs.StringVar(&o.GPU, "gpu", "auto", "GPU energy, split by the command's processes' GPU use: auto (NVML and amdgpu/i915/xe sysfs when present) or off.")
	fs.Float64Var(&o.GramsPerKWh, "emissions.grams-per-kwh", carbon.DefaultGramsPerKWh, "Carbon intensity of the electricity, gCO2e/kWh.")
	fs.StringVar(&o.Country, "emissions.country", "", "Take the carbon intensity from the embedded country table (ISO 3166-1, e.g. FR) instead.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			if help != nil {
				fmt.Fprintf(help, "Usage: wattrace measure [flags] -- CMD [ARGS...]\n\n%s", fs.FlagUsages())
			}
			return o, ErrHelp
		}
		return o, usageError{err}
	}
	o.Command = fs.Args()
	o.Format = FormatTable
	switch {
	case *asJSON && *asCSV:
		return o, usagef("--json and --csv exclude each other")
	case *asJSON:
		o.Format = FormatJSON
	case *asCSV:
		o.Format = FormatCSV
	}
	if len(o.Command) == 0 {
		return o, usagef("no command to measure (usage: wattrace measure [flags] -- CMD [ARGS...])")
	}
	if o.Repeat < 1 {
		return o, usagef("invalid value %d for -r/--repeat: must be at least 1", o.Repeat)
	}
	if o.Warmup < 0 {
		return o, usagef("invalid value %d for --warmup: must be at least 0", o.Warmup)
	}
	if err := checkInput(o.Input); err != nil {
		return o, err
	}
	if math.IsNaN(*idle) || *idle < 0 || *idle > 3600 {
		return o, usagef("invalid value %v for --idle: want seconds in [0, 3600]", *idle)
	}
	o.Idle = time.Duration(*idle * float64(time.Second))
	p, err := model.ParseIdlePolicy(*policy)
	if err != nil {
		return o, usagef("--idle-policy: %v", err)
	}
	o.IdlePolicy = p
	if !(o.GramsPerKWh >= 0 && o.GramsPerKWh <= 5000) {
		return o, usagef("invalid value %v for --emissions.grams-per-kwh: want [0, 5000]", o.GramsPerKWh)
	}
	for _, e := range []struct {
		flag, val string
		allowed   []string
	}{
		{"--accounting", o.Accounting, []string{AcctAuto, AcctBPF, AcctCgroupfs, AcctRusage}},
		{"--cgroup", o.Cgroup, []string{PlaceAuto, PlaceChild, PlaceSystemd, PlaceNone}},
		{"--cgroup.hierarchy", o.Hierarchy, []string{"auto", "v2", "cpuacct", "cpu"}},
		{"--power.source", o.PowerSource, []string{"auto", "rapl", "estimator"}},
		{"--power.ipmi", o.IPMI, []string{"auto", "off"}},
		{"--gpu", o.GPU, []string{"auto", "off"}},
	} {
		if !contains(e.allowed, e.val) {
			return o, usagef("invalid value %q for %s: allowed %s", e.val, e.flag, strings.Join(e.allowed, ", "))
		}
	}
	if o.Country != "" {
		if _, err := carbon.NewStatic(o.Country); err != nil {
			return o, usagef("--emissions.country: %v", err)
		}
	}
	if o.Keep != "" && !filepath.IsAbs(o.Keep) {
		return o, usagef("invalid value %q for --bpf.keep: want an absolute path (a BPF file system) or empty", o.Keep)
	}
	if (o.Accounting == AcctBPF || o.Accounting == AcctCgroupfs) && o.Cgroup == PlaceNone {
		return o, usagef("--accounting=%s needs the command in its own cgroup (--cgroup=none was given)", o.Accounting)
	}
	return o, nil
}

// checkInput refuses an --input file that every run could not read from
// its start: one that can't be opened, or a directory.
func checkInput(name string) error {
	if name == "" || name == "null" {
		return nil
	}
	f, err := os.Open(name)
	if err != nil {
		return usagef("--input: %v", err)
	}
	st, err := f.Stat()
	_ = f.Close()
	if err == nil && st.IsDir() {
		return usagef("--input %s: is a directory", name)
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
