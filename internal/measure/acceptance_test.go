package measure

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

const wattsPerCPU = 10.0

// jsonReport runs Main in this process with --json -o FILE and decodes
// the report.
func jsonReport(t *testing.T, args ...string) (Report, int, string) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "report.json")
	code, stdout, stderr := runMain(t, append([]string{"--json", "-o", out}, args...)...)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no report (status %d, stderr %q): %v", code, stderr, err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("report does not decode: %v\n%s", err, b)
	}
	return rep, code, stdout
}

func requireBPF(t *testing.T, rep Report) {
	t.Helper()
	if rep.Accounting != "bpf" || rep.Cgroup != PlaceChild {
		t.Fatalf("accounting %q in %q cgroup, want bpf in a child cgroup (warnings %q)", rep.Accounting, rep.Cgroup, rep.Warnings)
	}
}

func within(t *testing.T, what string, got, want, rel float64) {
	t.Helper()
	if d := testenv.RelDiff(got, want); d > rel {
		t.Errorf("%s = %.6g, want %.6g within %.1f%% (off by %.2f%%)", what, got, want, 100*rel, 100*d)
	}
}

// A CPU-bound command gets the dynamic energy of its CPU share: the
// fixture's package draws 10 W per busy CPU, so the command's dynamic
// energy is 10 W × its own CPU seconds, whatever else the node runs.
func TestCPUBoundCommandGetsItsShare(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	rep, code, _ := jsonReport(t, append([]string{"--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--"}, burner(t, 1.5)...)...)
	if code != 0 {
		t.Fatalf("status %d, warnings %q", code, rep.Warnings)
	}
	requireBPF(t, rep)
	r := rep.Runs[0]
	// The burner counts its process's whole life, the held helper's
	// start-up included, which ran before the run began.
	if r.CPUSeconds < 1.45 || r.CPUSeconds > 1.7 {
		t.Errorf("command CPU %.4f s, want the 1.5 s it burned", r.CPUSeconds)
	}
	if r.KernelCPUSeconds == nil {
		t.Fatal("no kernel accounting of the command's cgroup")
	}
	within(t, "CPU vs cpuacct.usage", r.CPUSeconds, *r.KernelCPUSeconds, 0.01)
	var pkg *Zone
	for i := range r.Zones {
		if r.Zones[i].Zone == "package" {
			pkg = &r.Zones[i]
		}
	}
	if pkg == nil || pkg.Method != MethodMeasured || pkg.Source != "rapl" {
		t.Fatalf("package zone %+v, want measured by rapl", pkg)
	}
	// The model: the command's CPU share of the zone's dynamic energy.
	if got, want := pkg.DynamicJ, r.CPUShare*pkg.NodeDynamicJ; math.Abs(got-want) > 1e-9*want {
		t.Errorf("dynamic %.9g J, want share %.6f × %.9g J = %.9g J", got, r.CPUShare, pkg.NodeDynamicJ, want)
	}
	// The physics of the fixture: 10 W per busy CPU. The fixture counts
	// busy CPUs from /proc/stat (tick-sampled), measure from the tasks'
	// exact runtime; on this shared VM the two differ by a few percent.
	t.Logf("node: %.3f J for %.3f CPU s; command: %.3f J for %.3f CPU s", r.NodeEnergyJ, r.NodeCPUSeconds, pkg.DynamicJ, r.CPUSeconds)
	within(t, "node energy", r.NodeEnergyJ, wattsPerCPU*r.NodeCPUSeconds, 0.10)
	within(t, "command dynamic energy", pkg.DynamicJ, wattsPerCPU*r.CPUSeconds, 0.10)
	if pkg.NodeIdleJ != 0 || pkg.IdleJ != 0 || rep.Baseline.Source != "none" {
		t.Errorf("idle %g J node, %g J command, baseline %q: want none without --idle", pkg.NodeIdleJ, pkg.IdleJ, rep.Baseline.Source)
	}
	if math.Abs(r.EnergyJ-pkg.DynamicJ) > 1e-9 || r.Grams != r.EnergyJ/3.6e6*rep.GramsPerKWh {
		t.Errorf("totals: energy %g J grams %g, want the package's %g J at %g g/kWh", r.EnergyJ, r.Grams, pkg.DynamicJ, rep.GramsPerKWh)
	}
	within(t, "average power", r.AverageW, r.EnergyJ/r.WallSeconds, 1e-9)
}

// --idle measures the baseline first and subtracts it: node idle energy
// is the baseline power × the run's wall time, the rest is dynamic, and
// under --idle-policy=cpu the command carries its CPU share of idle.
func TestIdleBaselineSubtracted(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	argv := burner(t, 0.5)
	rep, code, _ := jsonReport(t, append([]string{"--path.sysfs", sys, "--gpu=off", "--idle", "1", "--idle-policy", "cpu", "--"}, argv...)...)
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	if rep.Baseline.Source != "measured" || rep.Baseline.Seconds < 1 {
		t.Fatalf("baseline %+v, want measured over 1 s", rep.Baseline)
	}
	r := rep.Runs[0]
	for _, z := range r.Zones {
		if z.Zone != "package" {
			continue
		}
		w := rep.Baseline.Watts["package-0"]
		wantIdle := math.Min(w*r.WallSeconds, z.NodeJ)
		within(t, "node idle", z.NodeIdleJ, wantIdle, 1e-9)
		within(t, "node dynamic", z.NodeDynamicJ, z.NodeJ-wantIdle, 1e-9)
		within(t, "command idle (policy cpu)", z.IdleJ, r.CPUShare*z.NodeIdleJ, 1e-9)
		within(t, "command dynamic", z.DynamicJ, r.CPUShare*z.NodeDynamicJ, 1e-9)
		return
	}
	t.Fatal("no package zone")
}

// 1,000 short children: BPF accounting of the command's cgroup matches
// the kernel's own (cpuacct.usage of a parent cgroup the test owns, which
// keeps its children's time after they are removed) within 1%.
func TestForkHeavyMatchesKernelAccounting(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	parent := testenv.Cgroup(t, h.Mount, "measure-fork")
	before, ok := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
	if !ok {
		t.Fatalf("no kernel accounting in hierarchy %s", h.Kind)
	}
	sys := fixturePower(t, wattsPerCPU)
	rep, code, _ := jsonReport(t, "--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--cgroup=child", "--cgroup.parent", parent,
		"--", "sh", "-c", "i=0; while [ $i -lt 1000 ]; do /bin/true; i=$((i+1)); done")
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	requireBPF(t, rep)
	after, _ := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
	kernel := after - before
	r := rep.Runs[0]
	t.Logf("1000 children: BPF %.6f s, kernel %.6f s, rusage %.6f s", r.CPUSeconds, kernel, r.UserSeconds+r.SystemSeconds)
	if kernel < 0.1 {
		t.Fatalf("kernel accounted only %.3f s for 1000 processes", kernel)
	}
	within(t, "CPU of 1000 children vs the kernel's", r.CPUSeconds, kernel, 0.01)
}

// With --bpf.keep, the first measure loads the BPF programs and keeps
// them, later ones reuse them: the command's CPU time is the kernel's
// charge to its cgroup either way (fork-heavy, as above). Two at once:
// one holds the kept copy, the other loads its own and says so, and each
// sees only its own command.
func TestKeptProgramsStayExact(t *testing.T) {
	testenv.RequireRoot(t)
	keep := testenv.BPFFS(t)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	sys := fixturePower(t, wattsPerCPU)
	for i, want := range []string{"loaded and kept", "reused", "reused"} {
		parent := testenv.Cgroup(t, h.Mount, "measure-keep")
		before, ok := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
		if !ok {
			t.Fatalf("no kernel accounting in hierarchy %s", h.Kind)
		}
		rep, code, _ := jsonReport(t, "--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--bpf.keep", keep, "--cgroup=child", "--cgroup.parent", parent,
			"--", "sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done")
		if code != 0 {
			t.Fatalf("measure %d: status %d, warnings %q", i, code, rep.Warnings)
		}
		requireBPF(t, rep)
		if rep.BPFPrograms != want || len(rep.Warnings) != 0 {
			t.Errorf("measure %d: programs %q, warnings %q; want %q and none", i, rep.BPFPrograms, rep.Warnings, want)
		}
		after, _ := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
		r := rep.Runs[0]
		t.Logf("measure %d (%s): BPF %.6f s, kernel %.6f s", i, rep.BPFPrograms, r.CPUSeconds, after-before)
		within(t, "CPU of 300 children vs the kernel's", r.CPUSeconds, after-before, 0.01)
	}

	dir := t.TempDir()
	burns := []float64{0.6, 1.2}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range burns {
		cmd := measureProcess(t, filepath.Join(dir, strconv.Itoa(i)), append([]string{"--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--bpf.keep", keep, "--"}, burner(t, s)...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				errs[i] = fmt.Errorf("%w: %s", err, stderr.String())
			}
		}()
	}
	wg.Wait()
	how := map[string]int{}
	for i, s := range burns {
		if errs[i] != nil {
			t.Fatalf("measure %d: %v", i, errs[i])
		}
		rep := readReport(t, filepath.Join(dir, strconv.Itoa(i)))
		requireBPF(t, rep)
		how[rep.BPFPrograms]++
		if rep.BPFPrograms == "loaded" && (len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "in use by another measure")) {
			t.Errorf("measure %d loaded its own programs without saying why: %q", i, rep.Warnings)
		}
		r := rep.Runs[0]
		if r.CPUSeconds < s-0.05 || r.CPUSeconds > s+0.15 {
			t.Errorf("measure %d (%s): command CPU %.4f s, want its own %.1f s (the other burned %.1f s)", i, rep.BPFPrograms, r.CPUSeconds, s, burns[1-i])
		}
	}
	// Each either held the kept copy or (while the other held it) loaded
	// its own; they may also have run one after the other.
	if how["reused"]+how["loaded"] != 2 {
		t.Errorf("programs: %v, want each reused or loaded", how)
	}
}

// -r 5: the summary's mean, deviation and interval are those of the
// per-run records.
func TestRepeatsSummary(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	rep, code, _ := jsonReport(t, append([]string{"--path.sysfs", sys, "--gpu=off", "-r", "5", "--"}, burner(t, 0.2)...)...)
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	if len(rep.Runs) != 5 || rep.Summary.Runs != 5 {
		t.Fatalf("%d runs, summary of %d, want 5", len(rep.Runs), rep.Summary.Runs)
	}
	check := func(what string, st Stat, get func(Run) float64) {
		var xs []float64
		for i, r := range rep.Runs {
			if r.Run != i+1 {
				t.Errorf("run %d numbered %d", i+1, r.Run)
			}
			xs = append(xs, get(r))
		}
		var m float64
		for _, x := range xs {
			m += x
		}
		m /= 5
		var ss float64
		for _, x := range xs {
			ss += (x - m) * (x - m)
		}
		sd := math.Sqrt(ss / 4)
		const t4 = 2.7764451051977987 // Student's t, 4 degrees of freedom, 97.5%
		if st.N != 5 || math.Abs(st.Mean-m) > 1e-12*math.Abs(m) || st.StdDev == nil || math.Abs(*st.StdDev-sd) > 1e-9*sd {
			t.Errorf("%s: summary %+v, want mean %g sd %g", what, st, m, sd)
			return
		}
		h := t4 * sd / math.Sqrt(5)
		if math.Abs(st.CI95[0]-(m-h)) > 1e-9*math.Abs(m) || math.Abs(st.CI95[1]-(m+h)) > 1e-9*math.Abs(m) {
			t.Errorf("%s: CI %v, want [%g, %g]", what, *st.CI95, m-h, m+h)
		}
	}
	check("wall", rep.Summary.WallSeconds, func(r Run) float64 { return r.WallSeconds })
	check("cpu", rep.Summary.CPUSeconds, func(r Run) float64 { return r.CPUSeconds })
	check("energy", rep.Summary.EnergyJ, func(r Run) float64 { return r.EnergyJ })
	check("power", rep.Summary.AverageW, func(r Run) float64 { return r.AverageW })
	check("grams", rep.Summary.Grams, func(r Run) float64 { return r.Grams })
}

// measureProcess starts this test binary as `wattrace measure ARGS` with
// its report in a file.
func measureProcess(t testing.TB, report string, args ...string) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, append([]string{"--json", "-o", report}, args...)...)
	cmd.Env = append(os.Environ(), envMain+"=1")
	return cmd
}

func readReport(t testing.TB, path string) Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	return rep
}

// Two measures at once, each burning a different amount, each see only
// their own command's CPU.
func TestConcurrentMeasuresSeeOnlyTheirOwn(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	dir := t.TempDir()
	burns := []float64{0.6, 1.2}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, s := range burns {
		cmd := measureProcess(t, filepath.Join(dir, strconv.Itoa(i)), append([]string{"--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--"}, burner(t, s)...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := cmd.Run(); err != nil {
				errs[i] = err
				t.Logf("measure %d: %s", i, stderr.String())
			}
		}()
	}
	wg.Wait()
	for i, s := range burns {
		if errs[i] != nil {
			t.Fatalf("measure %d: %v", i, errs[i])
		}
		rep := readReport(t, filepath.Join(dir, strconv.Itoa(i)))
		requireBPF(t, rep)
		r := rep.Runs[0]
		if r.CPUSeconds < s-0.05 || r.CPUSeconds > s+0.15 {
			t.Errorf("measure %d: command CPU %.4f s, want its own %.1f s (the other burned %.1f s)", i, r.CPUSeconds, s, burns[1-i])
		}
	}
}

// The command's exit status is measure's; its stdout is untouched byte
// for byte; the report is on stderr.
func TestExitStatusAndStdout(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	code, stdout, stderr := runMain(t, "--path.sysfs", sys, "--gpu=off", "--", "sh", "-c", `printf 'a\000b\nno newline at the end'; exit 3`)
	if code != 3 {
		t.Errorf("status %d, want 3", code)
	}
	if want := "a\x00b\nno newline at the end"; stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	if !strings.Contains(stderr, "Energy of 'sh -c") || !strings.Contains(stderr, "exited with status 3") {
		t.Errorf("report on stderr:\n%s", stderr)
	}
	// A command killed by a signal: 128 + the signal, as shells say.
	code, _, _ = runMain(t, "--path.sysfs", sys, "--gpu=off", "--", "sh", "-c", "kill -KILL $$")
	if code != 128+9 {
		t.Errorf("killed command: status %d, want 137", code)
	}
}

// SIGINT reaches the command, and the partial report is printed, marked.
func TestSIGINTForwardedPartialReport(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	report := filepath.Join(t.TempDir(), "r.json")
	cmd := measureProcess(t, report, "--path.sysfs", sys, "--gpu=off", "-r", "3", "--",
		"sh", "-c", `trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.05; done`)
	var stdout bytes.Buffer
	pr, pw, _ := os.Pipe()
	cmd.Stdout = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	buf := make([]byte, 6)
	if _, err := pr.Read(buf); err != nil || string(buf) != "ready\n" {
		t.Fatalf("command did not start: %q %v", buf, err)
	}
	time.Sleep(100 * time.Millisecond)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	_, _ = stdout.ReadFrom(pr)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 {
		t.Fatalf("measure ended with %v, want status 7 (the command's, after its trap)", err)
	}
	if stdout.String() != "got-int\n" {
		t.Errorf("the command's stdout after ready: %q, want got-int (it got the SIGINT)", stdout.String())
	}
	rep := readReport(t, report)
	if !rep.Summary.Interrupted || len(rep.Runs) != 1 || !rep.Runs[0].Interrupted || rep.Runs[0].ExitStatus != 7 {
		t.Fatalf("report %+v, want one interrupted run with status 7 (no more repeats)", rep.Summary)
	}
	if rep.Runs[0].WallSeconds < 0.1 || len(rep.Runs[0].Signals) != 1 || rep.Runs[0].Signals[0] != "interrupt" {
		t.Errorf("run %+v: want its partial figures and the signal", rep.Runs[0])
	}
}

// On cgroup2 the command is born in its cgroup (clone3 with
// CLONE_INTO_CGROUP, no helper); hybrid hosts have cgroup2 too.
func TestCgroup2CloneIntoCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	if _, err := cgroup.Detect("/proc", "", "v2"); err != nil {
		needCgroup2(t, err)
	}
	sys := fixturePower(t, wattsPerCPU)
	rep, code, _ := jsonReport(t, "--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--cgroup=child", "--cgroup.hierarchy=v2",
		"--", "sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done")
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	requireBPF(t, rep)
	r := rep.Runs[0]
	if rep.Hierarchy != "v2" || r.KernelCPUSeconds == nil {
		t.Fatalf("hierarchy %q, kernel accounting %v", rep.Hierarchy, r.KernelCPUSeconds)
	}
	t.Logf("300 children: BPF %.6f s, cpu.stat %.6f s", r.CPUSeconds, *r.KernelCPUSeconds)
	// 2%, not the fork test's 1%: on the shared 2-vCPU machine under a
	// load of 20 the cgroup2 figure has come out up to 1.6% low (300
	// children, 3 ms), most runs within 0.4% or to the nanosecond.
	within(t, "CPU vs cpu.stat usage_usec", r.CPUSeconds, *r.KernelCPUSeconds, 0.02)
}

// Per socket: a command pinned to CPU 1 (socket 1 of the fixture's
// topology) gets its share of package-1's dynamic energy, 10 W × its CPU
// seconds, and next to nothing of package-0's.
func TestPerSocketShare(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixture2Sockets(t, wattsPerCPU)
	argv := append([]string{"taskset", "-c", "1"}, burner(t, 2.5)...)
	rep, code, _ := jsonReport(t, append([]string{"--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--"}, argv...)...)
	if code != 0 {
		t.Fatalf("status %d (warnings %q)", code, rep.Warnings)
	}
	requireBPF(t, rep)
	r := rep.Runs[0]
	zones := map[string]Zone{}
	for _, z := range r.Zones {
		zones[zoneKey(z.Zone, z.Socket)] = z
	}
	p0, p1 := zones["package-0"], zones["package-1"]
	t.Logf("command %.3f CPU s of %.3f; package-0: share %.4f, %.3f of %.3f J; package-1: share %.4f, %.3f of %.3f J",
		r.CPUSeconds, r.NodeCPUSeconds, p0.CPUShare, p0.DynamicJ, p0.NodeDynamicJ, p1.CPUShare, p1.DynamicJ, p1.NodeDynamicJ)
	within(t, "command's package-1 energy", p1.DynamicJ, wattsPerCPU*r.CPUSeconds, 0.10)
	if p0.DynamicJ > 0.05*p1.DynamicJ {
		t.Errorf("command got %.3f J of package-0 though it ran on socket 1 only", p0.DynamicJ)
	}
	if p1.CPUShare <= r.CPUShare {
		t.Errorf("share on socket 1 %.3f, want above its node-wide share %.3f", p1.CPUShare, r.CPUShare)
	}
}

// Unprivileged (here: this test binary run as nobody), BPF cannot load
// and no cgroup can be made: measure falls back to the child tree's rusage
// and /proc/stat, says so, and still measures the command.
func TestUnprivilegedFallback(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	dir, bin := nobodyCanRun(t, sys)
	report := filepath.Join(dir, "r.json")
	cmd := exec.Command(bin, "--json", "-o", report, "--path.sysfs", sys, "--gpu=off", "--",
		"env", envBurn+"=0.5", bin)
	cmd.Env = append(os.Environ(), envMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rep := readReport(t, report)
	if rep.Accounting != "rusage+procfs" || rep.Cgroup != PlaceNone || len(rep.Warnings) == 0 {
		t.Fatalf("accounting %q, cgroup %q, warnings %q: want the rusage fallback, said", rep.Accounting, rep.Cgroup, rep.Warnings)
	}
	r := rep.Runs[0]
	if r.CPUSeconds < 0.5 || r.CPUSeconds > 0.65 || r.KernelCPUSeconds != nil {
		t.Errorf("command CPU %.3f s (kernel %v), want the 0.5 s it burned from rusage", r.CPUSeconds, r.KernelCPUSeconds)
	}
	if r.NodeCPUSeconds < r.CPUSeconds || r.EnergyJ <= 0 {
		t.Errorf("node CPU %.3f s, energy %.3f J", r.NodeCPUSeconds, r.EnergyJ)
	}
}

// The helper (systemd scopes; systemd itself is not on the test
// machines): started with the report variable it writes its own cgroup
// to fd 3, then execs the command's path with argv[0] as the user gave
// it.
func TestHelperReportsItsCgroup(t *testing.T) {
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "measure", "--", "/bin/sh", "my-sh", "-c", `echo ran as "$0"`)
	cmd.Env = append(os.Environ(), helperReport+"="+string(h.Kind))
	cmd.ExtraFiles = []*os.File{w}
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	path, _ := io.ReadAll(r)
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want, err := ownCgroup(os.Getpid(), h.Kind)
	if err != nil {
		t.Fatal(err)
	}
	if string(path) != want || out.String() != "ran as my-sh\n" {
		t.Errorf("helper reported %q and printed %q, want %q and the command's output", path, out.String(), want)
	}
	// And the wrapping: systemd-run runs the helper in a new scope.
	p := newScope("/usr/bin/systemd-run", h)
	c := exec.Command("/bin/true", "a")
	c.Args[0] = "true"
	if _, err := p.prepare(c, "/bin/wattrace", []string{"measure"}); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(c.Args, " ")
	if !strings.HasPrefix(got, "/usr/bin/systemd-run --scope --quiet --collect --unit="+p.scope+" -p CPUAccounting=yes") ||
		!strings.HasSuffix(got, "-- /bin/wattrace measure -- /bin/true true a") || c.Path != "/usr/bin/systemd-run" {
		t.Errorf("systemd-run argv %q", got)
	}
}

// A command that leaves a process running keeps its cgroup alive: the
// report says so rather than killing what the user started.
func TestLeftoverProcessIsReported(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	pidFile := filepath.Join(t.TempDir(), "pid")
	rep, code, _ := jsonReport(t, "--path.sysfs", sys, "--gpu=off", "--accounting=bpf", "--", "sh", "-c", "sleep 30 </dev/null >/dev/null 2>&1 & echo $! > "+pidFile)
	if b, err := os.ReadFile(pidFile); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			t.Cleanup(func() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				h, _ := cgroup.Detect("/proc", "", "auto")
				left, _ := filepath.Glob(filepath.Join(h.Mount, "wattrace-measure-"+strconv.Itoa(os.Getpid())+"-*"))
				for _, d := range left {
					testenv.Remove(t, d)
				}
			})
		}
	}
	if code != 0 {
		t.Fatalf("status %d", code)
	}
	found := false
	for _, w := range rep.Warnings {
		found = found || strings.Contains(w, "remove cgroup") && strings.Contains(w, "device or resource busy")
	}
	if !found {
		t.Errorf("warnings %q, want the cgroup left busy", rep.Warnings)
	}
}

// nobodyCanRun copies this test binary where user nobody can run it and
// opens the fixture to nobody; it returns the directory (writable by
// nobody) and the binary.
func nobodyCanRun(t *testing.T, sys string) (string, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "wattrace-measure-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	self, _ := os.Executable()
	bin := filepath.Join(dir, "measure.test")
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, sys, filepath.Dir(sys)} {
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	return dir, bin
}

// A delegated cgroup2 subtree (owned by nobody, who runs measure inside
// it, as a systemd user session would): no BPF, but the command gets a
// child cgroup of the subtree, and its CPU is that cgroup's own counter.
func TestDelegatedSubtree(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "v2")
	if err != nil {
		needCgroup2(t, err)
	}
	sys := fixturePower(t, wattsPerCPU)
	dir, bin := nobodyCanRun(t, sys)
	deleg := testenv.Cgroup(t, h.Mount, "delegated")
	for _, f := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
		if err := os.Chown(filepath.Join(deleg, f), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := os.Open(deleg)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	report := filepath.Join(dir, "r.json")
	cmd := exec.Command(bin, "--json", "-o", report, "--path.sysfs", sys, "--gpu=off", "--cgroup=child", "--cgroup.parent", deleg,
		"--cgroup.hierarchy=v2", "--", "env", envBurn+"=0.5", bin)
	cmd.Env = append(os.Environ(), envMain+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
		UseCgroupFD: true, CgroupFD: int(fd.Fd())}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	rep := readReport(t, report)
	if rep.Accounting != "cgroupfs+procfs" || rep.Cgroup != PlaceChild || rep.Hierarchy != "v2" {
		t.Fatalf("accounting %q in %q cgroup (%s), warnings %q: want the delegated child's own counters",
			rep.Accounting, rep.Cgroup, rep.Hierarchy, rep.Warnings)
	}
	r := rep.Runs[0]
	if r.KernelCPUSeconds == nil || r.CPUSeconds != *r.KernelCPUSeconds {
		t.Fatalf("CPU %.6f s, kernel %v: want the cgroup's own figure", r.CPUSeconds, r.KernelCPUSeconds)
	}
	if r.CPUSeconds < 0.45 || r.CPUSeconds > 0.65 {
		t.Errorf("command CPU %.3f s, want the 0.5 s it burned", r.CPUSeconds)
	}
	if left, _ := filepath.Glob(filepath.Join(deleg, "wattrace-measure-*")); len(left) != 0 {
		t.Errorf("measure left %q", left)
	}
}

// needCgroup2 skips a test that needs cgroup2 where there is none, and
// fails it under CI, whose machines have it.
func needCgroup2(t *testing.T, err error) {
	t.Helper()
	testenv.Need(t, "no cgroup2 mounted: %v", err)
}
