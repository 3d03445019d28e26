package measure

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// CPUReader is what measure needs of an accounting source: cumulative
// per-cgroup CPU time (internal/bpfloader).
type CPUReader interface {
	Read() (reading.Usage, error)
	Mode() string
}

// CgroupReader reads one cgroup and its descendants alone: their CPU time
// since the cgroup was made (internal/bpfloader's Scope).
type CgroupReader interface {
	Read() (reading.CgroupUsage, error)
	Close() error
}

// NodeCPU reads the node's cumulative busy CPU time in seconds
// (/proc/stat), for the rusage fallback and the idle baseline.
type NodeCPU func() (float64, error)

// Env is what a measurement uses; Main builds it from the flags, tests
// build it themselves.
type Env struct {
	// Acct is the per-cgroup accounting; nil falls back to the child
	// tree's rusage and NodeCPU.
	Acct CPUReader
	// Place makes the command's cgroup for one run; nil runs it without.
	Place func() (*Placement, error)
	// Meter is the node's energy meter.
	Meter   power.Meter
	NodeCPU NodeCPU
	// CPUBusy reads each CPU's cumulative busy seconds (/proc/stat), by
	// which the node's time is placed on sockets.
	CPUBusy func() (map[int]float64, error)
	// CPUs is the number of online CPUs (the estimator's utilisation).
	CPUs int
	// Self and HelperArgs start this binary as Helper (cgroup v1).
	Self       string
	HelperArgs []string
	Stdin      io.Reader
	// OpenStdin, when set, gives each run its own stdin (--input); the
	// run closes it.
	OpenStdin func() (*os.File, error)
	Stdout    io.Writer
	Stderr    io.Writer
	// CgroupCPU: without Acct, the command's CPU is its cgroup's own
	// accounting (Placement.KernelCPU) rather than rusage.
	CgroupCPU bool
	// GPUs are the node's GPUs; nil when there are none. GPUZone numbers
	// their zones as the exporter does (internal/compose).
	GPUs    GPUReader
	GPUZone func(reading.GPUDevice) int
	// Sockets maps CPUs to sockets and NSockets counts them; with more
	// than one, each socket's zones are split by the usage on that socket.
	Sockets  map[int]int
	NSockets int
	// Signals are forwarded to the command; SIGINT, SIGTERM and SIGHUP
	// also end the measurement after the current run.
	Signals <-chan os.Signal
	// stopSig is the interrupt that stopped the measurement while no
	// command ran.
	stopSig os.Signal
	// Scope, when set with NodeNs, reads a run's cgroup alone rather than
	// the node's accounting (runReader); NodeNs is the node's cumulative
	// busy CPU time in ns, as exact as the accounting's (rootCPUAcct).
	Scope  func(dir string) (CgroupReader, error)
	NodeNs func() (uint64, error)
	// Settle bounds the wait, after the command exits, for its tasks'
	// last slices: the dead hook claims them at each task's final context
	// switch, the free hook an RCU grace period later (docs/kernel.md).
	// The accounting is read until it stops moving; only a command that
	// leaves processes running waits this long.
	Settle time.Duration
}

// procRec is a process's cumulative CPU time, the CPU it last ran on and
// its cgroup, for placing usage on sockets.
type procRec struct {
	ns  uint64
	cpu int
	cg  uint64
}

// multiSocket: usage is placed on sockets only where there are several.
func (e *Env) multiSocket() bool { return e.Acct != nil && e.NSockets > 1 }

// SocketTick is how often the accounting is read during a run on
// multi-socket nodes, so that each process's CPU time is placed on the
// socket it ran on at the time (a process that starts and ends between
// two reads has no known CPU; its time is spread like the rest).
const SocketTick = time.Second

// bySocket is CPU time (ns) by socket; -1 holds what has no known CPU.
type bySocket map[int]float64

// fold places the process time between two samples on sockets, the
// command's (in) apart from the rest.
func (e *Env) fold(a, b sample, in func(uint64) bool, cmd, rest bySocket) {
	for k, p := range b.procs {
		d := float64(p.ns)
		if p0, ok := a.procs[k]; ok {
			if p.ns <= p0.ns {
				continue
			}
			d = float64(p.ns - p0.ns)
		}
		if d == 0 {
			continue
		}
		sock := -1
		if s, ok := e.Sockets[p.cpu]; ok && p.cpu >= 0 {
			sock = s
		}
		if in(p.cg) {
			cmd[sock] += d
		} else {
			rest[sock] += d
		}
	}
}

// sample is one reading of everything at an instant.
type sample struct {
	at    time.Time
	cgCPU map[uint64]uint64 // ns per cgroup, BPF mode
	procs map[reading.ProcKey]procRec
	// sockBusy is each socket's busy CPU seconds (/proc/stat per CPU),
	// multi-socket nodes only.
	sockBusy bySocket
	nodeNs   float64 // node busy CPU, ns
	zones    []reading.ZoneSample
	// scoped: the accounting read the command's cgroup alone (runReader),
	// whose CPU time (ns, since the cgroup was made) is cmd; cgCPU is nil.
	scoped bool
	cmd    float64
}

// read takes a sample: the accounting, the node's CPU and, withMeter, the
// meter, whose read ctx bounds and cancels.
func (e *Env) read(ctx context.Context, withMeter bool) (sample, error) {
	s := sample{at: time.Now()}
	if e.Acct != nil {
		r, err := e.Acct.Read()
		if err != nil {
			return s, fmt.Errorf("read %s accounting: %w", e.Acct.Mode(), err)
		}
		s.cgCPU = make(map[uint64]uint64, len(r.Cgroups))
		if e.multiSocket() && e.CPUBusy != nil {
			busy, err := e.CPUBusy()
			if err != nil {
				return s, fmt.Errorf("read per-CPU time: %w", err)
			}
			s.sockBusy = bySocket{}
			for cpu, v := range busy {
				if sock, ok := e.Sockets[cpu]; ok {
					s.sockBusy[sock] += v
				}
			}
			s.procs = make(map[reading.ProcKey]procRec, len(r.Processes))
			for _, p := range r.Processes {
				s.procs[p.Key] = procRec{ns: p.CPUNs, cpu: p.CPU, cg: p.Cgroup}
			}
		}
		for _, c := range r.Cgroups {
			s.cgCPU[c.ID] = c.CPUNs
			s.nodeNs += float64(c.CPUNs)
		}
	} else if e.NodeCPU != nil {
		v, err := e.NodeCPU()
		if err != nil {
			return s, fmt.Errorf("read node CPU time: %w", err)
		}
		s.nodeNs = v * 1e9
	}
	if withMeter {
		if err := e.readMeter(ctx, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

func (e *Env) readMeter(ctx context.Context, s *sample) error {
	// A meter read in the background from a local device (hwmon) is read
	// now: its energy up to this instant, not up to its last poll (up
	// to power.meter-interval ago), which would shift the run's window.
	power.Refresh(ctx, e.Meter)
	z, err := e.Meter.Read(ctx)
	if err != nil {
		return fmt.Errorf("read power meter %s: %w", e.Meter.Name(), err)
	}
	s.zones = z
	return nil
}

// advance tells a modelling meter the node's utilisation (busy CPU
// nanoseconds since from) before it is read.
func (e *Env) advance(from time.Time, busyNs float64, now time.Time) {
	a, ok := e.Meter.(power.Advancer)
	if !ok || e.CPUs <= 0 {
		return
	}
	dt := now.Sub(from)
	if dt <= 0 {
		return
	}
	a.Advance(busyNs/(float64(e.CPUs)*float64(dt)), dt)
}

// bands reads a modelling meter's bands as ratios of its estimate.
func (e *Env) bands() map[string][2]float64 {
	er, ok := e.Meter.(power.EstimateReporter)
	if !ok {
		return nil
	}
	out := map[string][2]float64{}
	for _, est := range er.Estimates() {
		if est.Watts > 0 && est.LowerW >= 0 && est.LowerW <= est.Watts && est.UpperW >= est.Watts && !math.IsInf(est.UpperW, 0) {
			out[est.Source+"/"+zoneKey(est.Name, est.Socket)] = [2]float64{est.LowerW / est.Watts, est.UpperW / est.Watts}
		}
	}
	return out
}

// nodeDelta is the node's busy CPU time between two samples, in ns: the
// sum of every cgroup's growth in BPF mode (a cgroup the source forgot
// in between counts nothing rather than negative), /proc/stat otherwise.
func nodeDelta(a, b sample) float64 {
	if b.cgCPU != nil {
		return cgDelta(a.cgCPU, b.cgCPU, nil)
	}
	return max(b.nodeNs-a.nodeNs, 0)
}

// delta is the CPU time between two samples: each cgroup's growth, a
// cgroup missing from the first counting from 0 (created in between).
func cgDelta(a, b map[uint64]uint64, want func(uint64) bool) float64 {
	var ns float64
	for id, v := range b {
		if want != nil && !want(id) {
			continue
		}
		if v0 := a[id]; v >= v0 {
			ns += float64(v - v0)
		}
	}
	return ns
}

// raw is what one run measured, before attribution.
type raw struct {
	start, end sample
	cmdNs      float64
	nodeNs     float64
	// cmdSock and restSock weigh each socket's share of the command's
	// and the rest's CPU time by where their processes ran; nodeSock is
	// each socket's busy time by the kernel's per-CPU counters
	// (multi-socket nodes only).
	cmdSock, restSock, nodeSock bySocket
	// gpu is each GPU interval of the run.
	gpu []gpuSlice
	// bands are modelled zones' relative bands at the end of the run
	// ("source/zone-socket" → [low/watts, high/watts]).
	bands       map[string][2]float64
	user, sys   float64
	kernelCPU   float64
	haveKernel  bool
	exit        int
	interrupted bool
	stopSig     os.Signal
	signals     []string
	warnings    []string
}

// startError is a command that could not be started.
type startError struct {
	code int
	err  error
}

func (e startError) Error() string { return e.err.Error() }

// runOnce runs the command once in its own cgroup and reads everything
// around it.
func (e *Env) runOnce(ctx context.Context, path string, argv []string) (r raw, _ error) {
	var place *Placement
	if e.Place != nil {
		p, err := e.Place()
		if err != nil {
			return r, err
		}
		place = p
		defer func() {
			// r is the named result: the warning reaches the caller.
			if err := p.Remove(); err != nil {
				r.warnings = append(r.warnings, err.Error())
			}
		}()
	}
	cmd, closeIn, err := e.command(path, argv)
	if err != nil {
		return r, err
	}
	defer closeIn()
	h := hooks{}
	if place != nil {
		if h, err = place.prepare(cmd, e.Self, e.HelperArgs); err != nil {
			return r, err
		}
	}
	rd, err := e.runReader(place)
	if err != nil {
		if h.started != nil {
			_ = h.started()
		}
		return r, err
	}
	defer func() {
		if err := rd.close(); err != nil {
			r.warnings = append(r.warnings, err.Error())
		}
	}()
	if err := e.start(ctx, cmd, h, rd, argv[0], &r); err != nil {
		return r, err
	}
	w := e.wait(ctx, cmd, place, rd, &r)
	end := time.Now()
	var ee *exec.ExitError
	if w.err != nil && !errors.As(w.err, &ee) {
		return r, fmt.Errorf("wait for %s: %w", argv[0], w.err)
	}
	st := cmd.ProcessState
	r.exit = exitStatus(st)
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		r.user = tv(ru.Utime)
		r.sys = tv(ru.Stime)
	}
	return r, e.finish(ctx, place, rd, end, w, &r)
}

// command is the command to run, argv[0] as the user gave it, with its
// stdin; the returned function closes what was opened for it.
func (e *Env) command(path string, argv []string) (*exec.Cmd, func(), error) {
	cmd := exec.Command(path, argv[1:]...)
	cmd.Args[0] = argv[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	if e.OpenStdin == nil {
		return cmd, func() {}, nil
	}
	in, err := e.OpenStdin()
	if err != nil {
		return nil, nil, fmt.Errorf("--input: %w", err)
	}
	cmd.Stdin = in
	return cmd, func() { _ = in.Close() }, nil
}

// runReader reads one run's CPU: the node's accounting (Acct.Read, every
// task on the node, read before, after and while settling), or, where
// Env.Scope is set and the run has a cgroup of its own that lives until
// the run ends (PlaceChild), that cgroup alone with the node's busy CPU
// from Env.NodeNs, so that a run's cost does not grow with the tasks the
// node runs besides.
type runReader struct {
	e *Env
	// scoped: the node's CPU is NodeNs, and the command's is sc's (none
	// for the idle baseline).
	scoped bool
	sc     CgroupReader
}

// scoped: runs read their cgroup alone where they have one.
func (e *Env) scoped() bool { return e.Scope != nil && e.NodeNs != nil && !e.multiSocket() }

func (e *Env) runReader(place *Placement) (runReader, error) {
	rd := runReader{e: e}
	if !e.scoped() || place == nil || place.How != PlaceChild {
		return rd, nil
	}
	sc, err := e.Scope(place.Dir)
	if err != nil {
		return rd, fmt.Errorf("read cgroup %s: %w", place.Dir, err)
	}
	rd.scoped, rd.sc = true, sc
	return rd, nil
}

// readNode samples the node with nothing of ours running (the idle
// baseline): its busy CPU from NodeNs where runs read their cgroup alone,
// else the accounting.
func (e *Env) readNode(ctx context.Context, withMeter bool) (sample, error) {
	return runReader{e: e, scoped: e.scoped()}.read(ctx, false, withMeter)
}

func (rd runReader) close() error {
	if rd.sc == nil {
		return nil
	}
	return rd.sc.Close()
}

// read takes a sample: the accounting, the node's CPU and, withMeter, the
// meter, whose read ctx bounds and cancels. Where the run's cgroup is read
// alone, cmd says whether to read it: at the start it is known to be new
// and empty.
func (rd runReader) read(ctx context.Context, cmd, withMeter bool) (sample, error) {
	if !rd.scoped {
		return rd.e.read(ctx, withMeter)
	}
	s := sample{at: time.Now(), scoped: true}
	if cmd && rd.sc != nil {
		u, err := rd.sc.Read()
		if err != nil {
			return s, fmt.Errorf("read %s accounting of the command's cgroup: %w", rd.e.Acct.Mode(), err)
		}
		s.cmd = float64(u.CPUNs)
	}
	ns, err := rd.e.NodeNs()
	if err != nil {
		return s, fmt.Errorf("read the node's CPU time: %w", err)
	}
	s.nodeNs = float64(ns)
	if withMeter {
		if err := rd.e.readMeter(ctx, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readCmd reads the command's CPU alone (a settling read).
func (rd runReader) readCmd(ctx context.Context) (sample, error) {
	if !rd.scoped {
		return rd.e.read(ctx, false)
	}
	u, err := rd.sc.Read()
	if err != nil {
		return sample{}, fmt.Errorf("read %s accounting of the command's cgroup: %w", rd.e.Acct.Mode(), err)
	}
	return sample{at: time.Now(), scoped: true, cmd: float64(u.CPUNs)}, nil
}

// start takes the first reading and starts the command (h wraps the
// start where the placement needs it).
func (e *Env) start(ctx context.Context, cmd *exec.Cmd, h hooks, rd runReader, name string, r *raw) error {
	// The first reading comes before the command runs.
	start, err := rd.read(ctx, false, true)
	if err != nil {
		if h.started != nil {
			_ = h.started()
		}
		return err
	}
	if h.start != nil {
		err = h.start(cmd.Start)
	} else {
		err = cmd.Start()
	}
	if h.started != nil {
		if serr := h.started(); err == nil && serr != nil {
			// The command runs, but not where it can be measured:
			// end it and say why.
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return serr
		}
	}
	r.start = start
	if err != nil {
		code := ExitNotExecutable
		if errors.Is(err, os.ErrNotExist) {
			code = ExitNotFound
		}
		return startError{code, fmt.Errorf("%s: %w", name, err)}
	}
	return nil
}

// waited is what the wait for the command leaves for the end of the run:
// its error, the last per-socket sample and the GPUs' membership test.
type waited struct {
	err    error
	prev   sample
	member func(int) bool
}

// wait waits for the command, forwarding signals and, on multi-socket
// nodes or with GPUs, reading them each SocketTick.
func (e *Env) wait(ctx context.Context, cmd *exec.Cmd, place *Placement, rd runReader, r *raw) waited {
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	w := waited{prev: r.start}
	var tick <-chan time.Time
	sockets := e.multiSocket() && place != nil
	if sockets {
		r.cmdSock, r.restSock = bySocket{}, bySocket{}
	}
	if e.GPUs != nil {
		// The GPUs' interval starts with the command; their processes
		// are read each tick, while they run.
		w.member = gpuMember(place, cmd.Process.Pid)
		_ = e.GPUs.Interval(ctx, r.start.at)
	}
	if sockets || e.GPUs != nil {
		t := time.NewTicker(SocketTick)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case w.err = <-done:
			return w
		case now := <-tick:
			e.tick(ctx, now, place, rd, sockets, &w, r)
		case sig := <-e.Signals:
			r.signals = append(r.signals, sig.String())
			if isInterrupt(sig) {
				r.interrupted = true
				r.stopSig = sig
			}
			if !ttyDelivered(sig) {
				_ = cmd.Process.Signal(sig)
			}
		case <-ctx.Done():
			// The caller gave up (a test's deadline): stop the command.
			r.interrupted = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case w.err = <-done:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				w.err = <-done
			}
			return w
		}
	}
}

// tick reads the GPUs and, on multi-socket nodes, places the CPU time
// since the last tick on sockets.
func (e *Env) tick(ctx context.Context, now time.Time, place *Placement, rd runReader, sockets bool, w *waited, r *raw) {
	if e.GPUs != nil {
		r.gpu = append(r.gpu, e.gpuRead(ctx, now, w.member)...)
	}
	if !sockets {
		return
	}
	cur, err := rd.read(ctx, true, false)
	if err != nil {
		r.warnings = append(r.warnings, err.Error())
		return
	}
	ids := place.ids()
	e.fold(w.prev, cur, func(id uint64) bool { return ids[id] }, r.cmdSock, r.restSock)
	w.prev = cur
}

// finish reads the end of the run and the command's CPU time once its
// tasks' last slices are claimed.
func (e *Env) finish(ctx context.Context, place *Placement, rd runReader, end time.Time, w waited, r *raw) error {
	// The node's CPU and energy end when the command does; the
	// command's cgroup gets a second read after its tasks' last slices
	// have been claimed.
	fin, err := rd.read(ctx, true, false)
	if err != nil {
		return err
	}
	fin.at = end
	r.nodeNs = nodeDelta(r.start, fin)
	if e.GPUs != nil {
		r.gpu = append(r.gpu, e.gpuRead(ctx, end, w.member)...)
	}
	e.advance(r.start.at, r.nodeNs, end)
	if err := e.readMeter(ctx, &fin); err != nil {
		return err
	}
	r.end = fin
	r.bands = e.bands()
	if place != nil && e.Acct != nil {
		if err := e.settleCommand(ctx, place, rd, fin, w.prev, r); err != nil {
			return err
		}
	} else if place != nil && e.CgroupCPU {
		// The cgroup is new: its counter is the command's CPU time, final
		// once its tasks' last slices are charged.
		e.settleKernel(place)
	}
	e.commandFigure(place, r)
	return nil
}

// settleCommand reads the accounting until the command's CPU time stops
// moving and takes it, and on multi-socket nodes places the last of it.
func (e *Env) settleCommand(ctx context.Context, place *Placement, rd runReader, fin, prev sample, r *raw) error {
	var in func(uint64) bool
	if !rd.scoped {
		ids := place.ids()
		in = func(id uint64) bool { return ids[id] }
	}
	late, err := e.settle(ctx, rd, fin, in, place)
	if err != nil {
		return err
	}
	r.cmdNs = cmdDelta(r.start, late, in)
	if r.cmdSock != nil {
		e.fold(prev, late, in, r.cmdSock, r.restSock)
		r.nodeSock = bySocket{}
		for sock, v := range fin.sockBusy {
			r.nodeSock[sock] = max(v-r.start.sockBusy[sock], 0)
		}
	}
	// What the command's tasks were charged after the end read
	// belongs to the interval too.
	r.nodeNs += cmdDelta(fin, late, in)
	return nil
}

// commandFigure settles which figure is the command's CPU time: the
// accounting's, the cgroup's own counter, or the child tree's rusage.
func (e *Env) commandFigure(place *Placement, r *raw) {
	if place != nil {
		r.kernelCPU, r.haveKernel = place.KernelCPU()
		// The starting thread's time in the cgroup is in both figures
		// and is measure's, not the command's.
		r.kernelCPU = max(r.kernelCPU-place.startCharge/1e9, 0)
		if e.Acct != nil {
			r.cmdNs = max(r.cmdNs-place.startCharge, 0)
		}
	}
	switch {
	case place != nil && e.Acct != nil:
	case place != nil && e.CgroupCPU && r.haveKernel:
		r.cmdNs = r.kernelCPU * 1e9
	default:
		r.cmdNs = (r.user + r.sys) * 1e9
	}
}

// cmdDelta is the command's CPU time between two samples, in ns: its
// cgroup's own figure where it is read alone, else the growth of the
// cgroups in (cgDelta).
func cmdDelta(a, b sample, in func(uint64) bool) float64 {
	if b.scoped {
		return max(b.cmd-a.cmd, 0)
	}
	return cgDelta(a.cgCPU, b.cgCPU, in)
}

// settleFirstPoll is the first gap between two reads while the
// command's tasks finish exiting; it doubles up to settleMaxPoll. A dying
// task reaches its last context switch microseconds after its parent
// reaps it, unless it is preempted on the way.
const (
	settleFirstPoll = 50 * time.Microsecond
	settleMaxPoll   = 8 * time.Millisecond
)

// nap sleeps d in the kernel (nanosleep): the Go runtime's timers wake
// a sleeping goroutine about a millisecond late on this kind of VM, which
// made each run's first settle read cost 1.1 ms for a 50 µs wait.
func nap(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}

// settle reads the accounting after the command's exit (fin) until the
// command's CPU time stops moving: a read that adds nothing to the one
// before it, twice in a row, or once when the cgroup's own kernel
// counter, which the scheduler charges as the tasks run, shows no more
// than ours (a dying task preempted before its last switch shows in the
// kernel's counter first). The wait is bounded by Settle.
func (e *Env) settle(ctx context.Context, rd runReader, fin sample, in func(uint64) bool, place *Placement) (sample, error) {
	last := fin
	deadline := time.Now().Add(e.Settle)
	gap, quiet := settleFirstPoll, 0
	haveKernel := false
	if place != nil {
		_, haveKernel = place.KernelCPU()
	}
	for time.Now().Before(deadline) {
		nap(gap)
		cur, err := rd.readCmd(ctx)
		if err != nil {
			return last, err
		}
		if cmdDelta(last, cur, in) > 0 {
			quiet = 0
		} else {
			quiet++
		}
		last = cur
		if quiet >= 2 || quiet == 1 && haveKernel && !e.behindKernel(place, cur, in) {
			return last, nil
		}
		gap = min(2*gap, settleMaxPoll)
	}
	return last, nil
}

// behindKernel: the cgroup's own counter holds more than the accounting
// has claimed for it (beyond the two's usual difference, 0.2% and 50 µs:
// cgroup2 counts whole microseconds).
func (e *Env) behindKernel(place *Placement, s sample, in func(uint64) bool) bool {
	k, ok := place.KernelCPU()
	if !ok {
		return false
	}
	ours := cmdDelta(sample{}, s, in) / 1e9
	return ours < k*0.998-50e-6
}

// settleKernel waits, bounded by Settle, until the cgroup's own counter
// stops moving (twice in a row).
func (e *Env) settleKernel(place *Placement) {
	deadline := time.Now().Add(e.Settle)
	last, _ := place.KernelCPU()
	gap, quiet := settleFirstPoll, 0
	for quiet < 2 && time.Now().Before(deadline) {
		nap(gap)
		cur, _ := place.KernelCPU()
		if cur > last {
			quiet = 0
		} else {
			quiet++
		}
		last = cur
		gap = min(2*gap, settleMaxPoll)
	}
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

// exitStatus is the command's status as a shell reports it.
func exitStatus(st *os.ProcessState) int {
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

func isInterrupt(sig os.Signal) bool {
	return sig == syscall.SIGINT || sig == syscall.SIGTERM || sig == syscall.SIGHUP
}

// ttyDelivered: a Ctrl-C or Ctrl-\ typed at the terminal reaches the
// whole foreground process group, the command included; forwarding it
// again would make a command that counts its interrupts (a second Ctrl-C
// forces many tools to quit) see two. The foreground group is the
// controlling terminal's (/dev/tty), whatever fd 0 is: with stdin
// redirected, fd 0 is no terminal, yet Ctrl-C still reaches the group.
func ttyDelivered(sig os.Signal) bool {
	if sig != syscall.SIGINT && sig != syscall.SIGQUIT {
		return false
	}
	tty, err := unix.Open("/dev/tty", unix.O_RDONLY|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return false // no controlling terminal: the signal was sent, not typed
	}
	defer unix.Close(tty)
	fg, err := unix.IoctlGetInt(tty, unix.TIOCGPGRP)
	return err == nil && fg == unix.Getpgrp()
}
