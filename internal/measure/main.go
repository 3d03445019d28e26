package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/power"
)

// Compile-time checks of the seams.
var (
	_ CPUReader = (*bpfloader.Accounting)(nil)
)

// Main is `wattrace measure ARGS…`: it returns the process's exit status
// and writes nothing but the report (stderr, or -o) and one-line errors;
// the command's stdout is its own. helperArgs are the arguments that make
// this binary call Helper ("measure" for the wattrace binary).
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, helperArgs []string) int {
	return mainWith(ctx, args, stdin, stdout, stderr, helperArgs, nil)
}

// mainWith is Main with the GPU sources' opener given (nil: node.Open;
// tests fake the GPUs, which this machine lacks).
func mainWith(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, helperArgs []string,
	gpus func(node.Config, *zap.Logger) (*node.GPUs, error)) int {
	if IsHelper() {
		return Helper(args)
	}
	fail := func(code int, err error) int {
		fmt.Fprintln(stderr, errLine(err))
		return code
	}
	o, err := Parse(args, stderr)
	if errors.Is(err, ErrHelp) {
		return 0
	}
	if err != nil {
		return fail(ExitUsage, err)
	}
	path, err := exec.LookPath(o.Command[0])
	if err != nil {
		// As the shells: 127 only when there is nothing by that name;
		// something there that cannot run (no x bit, a directory) is
		// 126.
		code := ExitNotExecutable
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, exec.ErrNotFound) && !fileExists(o.Command[0]) {
			code = ExitNotFound
		}
		return fail(code, fmt.Errorf("%s: %w", o.Command[0], unwrapExec(err)))
	}
	out := stderr
	if o.Output != "" {
		f, err := os.Create(o.Output)
		if err != nil {
			return fail(ExitSetup, fmt.Errorf("-o: %w", err))
		}
		defer f.Close()
		out = f
	}

	// Signals are forwarded to the command, not acted on: the caller's
	// ctx (cancelled by SIGINT in the wattrace binary) must not stop the
	// run before the command does.
	ctx = context.WithoutCancel(ctx)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)

	self, err := os.Executable()
	if err != nil {
		return fail(ExitSetup, fmt.Errorf("find this binary (for the cgroup helper): %w", err))
	}
	e := &Env{Stdin: stdin, Stdout: stdout, Stderr: stderr, Signals: sigs, Self: self, HelperArgs: helperArgs,
		Settle: 250 * time.Millisecond, CPUs: runtime.NumCPU()}
	switch o.Input {
	case "":
	case "null":
		e.OpenStdin = func() (*os.File, error) { return os.Open(os.DevNull) }
	default:
		file := o.Input
		e.OpenStdin = func() (*os.File, error) { return os.Open(file) }
	}
	rep := Report{Cgroup: PlaceNone, Accounting: "rusage+procfs"}
	if o.Input == "" && o.Repeat+o.Warmup > 1 && stdinIsData(stdin) {
		rep.Warnings = append(rep.Warnings, "the runs share measure's stdin, which the first may consume: --input FILE gives every run the whole file, --input null none")
	}
	closeAll, err := setup(ctx, &o, e, &rep, gpus)
	defer closeAll()
	if err != nil {
		return fail(ExitSetup, err)
	}
	rep, err = Measure(ctx, o, e, path, rep)
	if err != nil && !isStart(err) && len(rep.Runs) == 0 {
		return fail(ExitSetup, err)
	}
	if err != nil {
		fmt.Fprintln(stderr, errLine(err))
		if isStart(err) && len(rep.Runs) == 0 {
			return exitCode(rep, err)
		}
		rep.Warnings = append(rep.Warnings, err.Error())
	}
	var own syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &own) == nil {
		rep.SelfCPUSeconds = tv(own.Utime) + tv(own.Stime)
	}
	if werr := Write(out, o.Format, rep); werr != nil {
		return fail(ExitSetup, fmt.Errorf("write report: %w", werr))
	}
	return exitCode(rep, err)
}

// stdinIsData: stdin is a file or a pipe, not a terminal, so a run can
// read it to its end and leave the next run nothing.
func stdinIsData(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err != nil
}

func isStart(err error) bool {
	var se startError
	return errors.As(err, &se)
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// unwrapExec drops exec's "exec: " prefix where the cause says it all.
func unwrapExec(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

// setup opens the meter, the accounting and the placement, falling back
// as the flags allow; the returned function closes what was opened.
func setup(ctx context.Context, o *Options, e *Env, rep *Report, gpus func(node.Config, *zap.Logger) (*node.GPUs, error)) (func(), error) {
	var cl closers
	log := zap.NewNop()
	if err := procfsReaders(o, e); err != nil {
		return cl.closeAll, err
	}
	if err := carbonSource(o, rep); err != nil {
		return cl.closeAll, err
	}
	src := openSources(ctx, o, rep, gpus, log)
	join := func() error { return src.join(e, &cl) }
	defer func() { _ = join() }() // never leave the meters open behind us
	topology(o, e)

	if o.Cgroup == PlaceNone || o.Accounting == AcctRusage && o.Cgroup == PlaceAuto {
		if o.Cgroup == PlaceAuto {
			rep.Warnings = append(rep.Warnings, "--accounting=rusage: the command runs without a cgroup of its own")
		}
		return cl.closeAll, join()
	}
	h, err := cgroup.Detect(o.ProcfsRoot, "", o.Hierarchy)
	if err != nil {
		return cl.closeAll, errors.Join(fallback(o, rep, fmt.Errorf("cgroup hierarchy: %w", err)), join())
	}
	place, how, err := placement(o, h)
	if err != nil {
		return cl.closeAll, errors.Join(fallback(o, rep, err), join())
	}
	if how == PlaceChild {
		parent := o.CgroupParent
		if parent == "" {
			parent = h.Mount
		}
		rep.Warnings = append(rep.Warnings, sweepStale(parent)...)
	}
	if err := openAccounting(o, e, rep, h, how, &cl, log); err != nil {
		return cl.closeAll, err
	}
	if err := cgroupFallback(o, e, rep, h); err != nil {
		return cl.closeAll, err
	}
	e.Place = place
	rep.Cgroup, rep.Hierarchy = how, string(h.Kind)
	return cl.closeAll, join()
}

// closers close what setup opened, last first.
type closers []func()

func (c *closers) add(f func()) { *c = append(*c, f) }

func (c *closers) closeAll() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
}

// procfsReaders reads the node's CPU time from /proc/stat: the rusage
// fallback's node figure, and each CPU's for placing time on sockets.
func procfsReaders(o *Options, e *Env) error {
	pfs, err := procfs.NewFS(o.ProcfsRoot)
	if err != nil {
		return fmt.Errorf("--path.procfs: %w", err)
	}
	e.NodeCPU = func() (float64, error) {
		st, err := pfs.Stat()
		if err != nil {
			return 0, err
		}
		// Steal is time the hypervisor gave to someone else: not ours.
		c := st.CPUTotal
		return c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ, nil
	}
	e.CPUBusy = func() (map[int]float64, error) {
		st, err := pfs.Stat()
		if err != nil {
			return nil, err
		}
		out := make(map[int]float64, len(st.CPU))
		for cpu, c := range st.CPU {
			out[int(cpu)] = c.User + c.Nice + c.System + c.IRQ + c.SoftIRQ
		}
		return out, nil
	}
	return nil
}

// carbonSource sets the report's carbon intensity from the flags.
func carbonSource(o *Options, rep *Report) error {
	rep.GramsPerKWh, rep.CarbonSource = o.GramsPerKWh, "constant"
	if o.Country == "" {
		return nil
	}
	s, err := carbon.NewStatic(o.Country)
	if err != nil {
		return fmt.Errorf("--emissions.country: %w", err)
	}
	rep.GramsPerKWh = s.Country.GramsPerKWh
	rep.CarbonSource = fmt.Sprintf("static %s %d", s.Country.Alpha2, s.Country.Year)
	return nil
}

// sources are the meters and GPU sources being opened (openSources).
type sources struct {
	ch     chan openedSources
	joined bool
}

type openedSources struct {
	n   *compose.Node
	err error
}

// openSources opens the exporter's composition: the same meters and GPU
// sources, with the same exclusions between them. It opens while the
// cgroup and the BPF accounting are set up: a meter that must prove its
// counters advance (perf RAPL: up to 250 ms where a hypervisor's power PMU
// counts nothing) then costs no more than the longer of the two.
func openSources(ctx context.Context, o *Options, rep *Report, gpus func(node.Config, *zap.Logger) (*node.GPUs, error), log *zap.Logger) *sources {
	src := &sources{ch: make(chan openedSources, 1)}
	verdicts, why := verdictDir()
	if why != "" {
		rep.Warnings = append(rep.Warnings, why)
	}
	go func() {
		n, err := compose.Open(ctx, composeConfig(o, verdicts, gpus), log)
		src.ch <- openedSources{n, err}
	}()
	return src
}

// join waits for the sources and hands them to e; later calls do nothing.
func (src *sources) join(e *Env, cl *closers) error {
	if src.joined {
		return nil
	}
	src.joined = true
	got := <-src.ch
	if got.err != nil {
		return got.err
	}
	cl.add(func() { _ = got.n.Close() })
	e.Meter = got.n.Meter
	if got.n.GPUs != nil {
		e.GPUs, e.GPUZone = got.n.GPUs, got.n.GPUZone
	}
	return nil
}

// topology reads the online CPUs and their sockets.
func topology(o *Options, e *Env) {
	if n, err := power.OnlineCPUs(o.SysfsRoot); err == nil && n > 0 {
		e.CPUs = n
	}
	e.NSockets = 1
	if socks, err := power.CPUSockets(o.SysfsRoot); err == nil {
		n := map[int]bool{}
		for _, s := range socks {
			n[s] = true
		}
		e.Sockets, e.NSockets = socks, max(1, len(n))
	}
}

// openAccounting opens the exporter's accounting, through the same
// composition, where the flags ask for BPF; where BPF cannot load,
// measure falls back to the command's own cgroup (cgroupFallback), not to
// procfs. Runs in a child cgroup read it alone where they can (scopeRuns).
func openAccounting(o *Options, e *Env, rep *Report, h cgroup.Hierarchy, how string, cl *closers, log *zap.Logger) error {
	if o.Accounting != AcctAuto && o.Accounting != AcctBPF {
		return nil
	}
	mode := compose.AcctAuto
	if o.Accounting == AcctBPF {
		mode = compose.AcctBPF
	}
	a, err := compose.OpenAccounting(compose.AccountingConfig{Mode: mode, Hierarchy: h, NoProcfs: true, Keep: o.Keep}, log)
	switch {
	case err != nil:
		return fmt.Errorf("BPF accounting: %w", err)
	case a.BPF == nil:
		rep.Warnings = append(rep.Warnings, "BPF accounting unavailable: "+a.Fallback.Error())
		return nil
	}
	cl.add(func() { _ = a.BPF.Close() })
	e.Acct = a.BPF
	rep.Accounting = bpfloader.Mode
	k := a.BPF.Kept()
	rep.BPFPrograms = k.How
	if k.Note != "" {
		rep.Warnings = append(rep.Warnings, k.Note)
	}
	if how == PlaceChild {
		scopeRuns(o, e, rep, a.BPF, cl)
	}
	return nil
}

// scopeRuns makes each run read its own cgroup alone, where the kernel
// can (bpfloader.Scope) and the node's busy CPU is to be had as exactly
// (rootCPUAcct), and the node has one socket (on several, each process's CPU
// is placed on the socket it ran on, which takes the node's read).
// Otherwise runs read the node's accounting, as the exporter does; the
// report says which (Report.CPURead).
func scopeRuns(o *Options, e *Env, rep *Report, a *bpfloader.Accounting, cl *closers) {
	rep.CPURead = ReadNode
	if e.NSockets > 1 || !a.CanScope() {
		return
	}
	node, closeIt, why := rootCPUAcct(o.ProcfsRoot)
	if why != "" {
		return
	}
	// This process's threads are older than the programs: where they ran
	// is recorded now, so the one that starts a command from inside its
	// cgroup (cgroup v1) takes out only what it ran there.
	if err := a.ClaimProcess(os.Getpid()); err != nil {
		closeIt()
		rep.Warnings = append(rep.Warnings, "runs read the node's accounting: "+err.Error())
		return
	}
	cl.add(closeIt)
	e.NodeNs = node
	e.Scope = func(dir string) (CgroupReader, error) { return a.Scope(dir) }
	rep.CPURead = ReadCgroup
}

// cgroupFallback: without BPF, the command's CPU is its cgroup's own
// counter, where the hierarchy keeps one, else its child tree's rusage.
func cgroupFallback(o *Options, e *Env, rep *Report, h cgroup.Hierarchy) error {
	if e.Acct != nil || o.Accounting == AcctRusage {
		return nil
	}
	if h.Kind == cgroup.CPU {
		// v1 cpu keeps no usage counter.
		if o.Accounting == AcctCgroupfs {
			return fmt.Errorf("--accounting=cgroupfs: hierarchy %s keeps no CPU usage", h.Kind)
		}
		rep.Warnings = append(rep.Warnings, "the command's CPU is its child tree's rusage: hierarchy cpu keeps no usage counter")
		return nil
	}
	e.CgroupCPU = true
	rep.Accounting = "cgroupfs+procfs"
	return nil
}

// fallback decides whether a failure of the cgroup or BPF path is fatal
// (asked for explicitly) or falls back to rusage and procfs (said so).
func fallback(o *Options, rep *Report, err error) error {
	if o.Accounting == AcctBPF || o.Accounting == AcctCgroupfs || o.Cgroup == PlaceChild || o.Cgroup == PlaceSystemd {
		return err
	}
	rep.Warnings = append(rep.Warnings, "fell back to rusage and /proc/stat: "+err.Error())
	return nil
}

// placement chooses how each run gets its cgroup and checks, once, that
// it can be made.
func placement(o *Options, h cgroup.Hierarchy) (func() (*Placement, error), string, error) {
	how := o.Cgroup
	if how == PlaceAuto {
		how = PlaceChild
		if o.CgroupParent == "" && systemdRunning() {
			how = PlaceSystemd
		}
	}
	if how == PlaceSystemd {
		if h.Kind != cgroup.V2 && h.Kind != cgroup.CPUAcct {
			return nil, "", fmt.Errorf("systemd scope: hierarchy %s is not one systemd accounts in", h.Kind)
		}
		run, err := exec.LookPath("systemd-run")
		if err != nil {
			return nil, "", fmt.Errorf("systemd scope: %w", err)
		}
		return func() (*Placement, error) { return newScope(run, h), nil }, PlaceSystemd, nil
	}
	probe, err := newChild(h, o.CgroupParent)
	if err != nil {
		return nil, "", err
	}
	if err := probe.Remove(); err != nil {
		return nil, "", err
	}
	return func() (*Placement, error) { return newChild(h, o.CgroupParent) }, PlaceChild, nil
}

func systemdRunning() bool {
	_, err := os.Stat("/run/systemd/system")
	return err == nil
}
