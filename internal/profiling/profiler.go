// Package profiling counts hardware, software and cache perf events for the
// processes that ask for it: those whose environment sets one of the
// configured variables (WATTRACE_PROFILE=1 by default). Counting every
// process would cost file descriptors and PMU counters on the whole node;
// opting in lets a user profile one job while the node-wide energy
// accounting stays as cheap as before.
//
// # Threads
//
// perf_event_open with pid=TGID counts only that one thread. The profiler
// therefore opens one counter per event on every thread the process has
// when it is first seen, and, where the kernel has it (Linux 5.13+), sets
// inherit together with inherit_thread so that threads created afterwards
// are counted by the counter of the thread that created them, as perf stat
// -p does. inherit_thread keeps child processes out: a child carries the
// opt-in variable too and gets counters of its own, and plain inherit would
// count it twice. Exited threads' counts stay in their counters.
//
// Older kernels reject inherit_thread; there the profiler opens counters
// without inherit and looks for new threads at every Scan, folding the
// final counts of exited threads into the process. Threads that start and
// end between two scans are then missed.
package profiling

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/procpid"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Defaults for the Config limits.
const (
	DefaultMaxProcesses = 128
	// DefaultMaxFDs caps the counters' file descriptors when the open-file
	// limit allows more: each is one read(2) per Read, so this also bounds
	// the cost of an interval (8192 reads take a few ms).
	DefaultMaxFDs = 8192
)

// Config configures a Profiler.
type Config struct {
	// ProcfsRoot is the procfs mount, "/proc" when empty.
	ProcfsRoot string
	// EnvVars are the opt-in variables; at least one is required.
	EnvVars []string
	// Hardware, Software and Cache name the events (see Events). Unknown
	// names are an error; events this machine lacks are logged once and
	// left out.
	Hardware, Software, Cache []string
	// MaxProcesses bounds the processes counted at once;
	// DefaultMaxProcesses when 0. Opted-in processes beyond it are counted
	// once a slot frees.
	MaxProcesses int
	// MaxFDs bounds the counters' file descriptors (threads × events over
	// all processes); 0 is DefaultMaxFDs or half the open-file limit,
	// whichever is lower. A process whose threads would exceed it is not
	// counted.
	MaxFDs int
	Log    *zap.Logger
}

// Stats describes the profiler's state, for the exporter's own metrics.
type Stats struct {
	Profiled int // processes counted now
	FDs      int // counter file descriptors open
	// Waiting is the opted-in processes not counted now for MaxProcesses
	// or MaxFDs; each scan tries them again.
	Waiting int
	// Skipped counts opted-in processes that had to wait at least once
	// (cumulative, each process once).
	Skipped uint64
	// InheritThread is true where new threads are counted through
	// inherit_thread, false where each Scan looks for them.
	InheritThread bool
}

// Profiler opens and reads the counters of opted-in processes. Its methods
// may be called from several goroutines.
type Profiler struct {
	ops    counterOps
	procfs string
	filter *Filter
	log    *zap.Logger
	maxPro int
	maxFDs int

	mu            sync.Mutex
	closed        bool
	events        []reading.PerfEvent
	usable        []bool            // per events index; false once the event proved unsupported
	unavailable   map[string]string // event name -> reason, logged once
	inheritThread bool
	procs         map[reading.ProcKey]*proc
	optIn         map[reading.ProcKey]decision // environ decisions of live processes
	fds           int
	waiting       map[reading.ProcKey]bool
	skipped       uint64
	warnedLimit   bool
}

// decision is a process's opt-in as read from its environment while it
// had comm.
type decision struct {
	comm string
	in   bool
}

// proc is one profiled process.
type proc struct {
	key     reading.ProcKey
	comm    string
	cgroup  uint64
	threads map[int][]int // tid -> fd per events index, -1 where not open
	// base holds, per event, the final scaled counts of threads whose
	// counters were closed (only without inherit_thread).
	base []float64
	has  []bool // per event: some counter of this process counted it
}

// New validates cfg, finds which events this machine counts and whether
// the kernel has inherit_thread. It fails when no event can be counted at
// all, or when perf_event_open is not permitted.
func New(cfg Config) (*Profiler, error) {
	return newProfiler(cfg, kernelOps{})
}

func newProfiler(cfg Config, ops counterOps) (*Profiler, error) {
	filter, err := NewFilter(cfg.EnvVars)
	if err != nil {
		return nil, err
	}
	var events []reading.PerfEvent
	for _, k := range []struct {
		kind  string
		names []string
	}{{reading.PerfKindHardware, cfg.Hardware}, {reading.PerfKindSoftware, cfg.Software}, {reading.PerfKindCache, cfg.Cache}} {
		evs, err := ParseEvents(k.kind, k.names)
		if err != nil {
			return nil, err
		}
		events = append(events, evs...)
	}
	if len(events) == 0 {
		return nil, errors.New("profiling: no perf events configured")
	}
	if cfg.MaxProcesses < 0 || cfg.MaxFDs < 0 {
		return nil, fmt.Errorf("profiling: negative limit (max processes %d, max fds %d)", cfg.MaxProcesses, cfg.MaxFDs)
	}
	p := &Profiler{
		ops:         ops,
		procfs:      cfg.ProcfsRoot,
		filter:      filter,
		log:         cfg.Log,
		maxPro:      cfg.MaxProcesses,
		maxFDs:      cfg.MaxFDs,
		unavailable: make(map[string]string),
		procs:       make(map[reading.ProcKey]*proc),
		optIn:       make(map[reading.ProcKey]decision),
		waiting:     make(map[reading.ProcKey]bool),
	}
	if p.procfs == "" {
		p.procfs = "/proc"
	}
	if p.log == nil {
		p.log = zap.NewNop()
	}
	if p.maxPro == 0 {
		p.maxPro = DefaultMaxProcesses
	}
	if p.maxFDs == 0 {
		p.maxFDs = defaultMaxFDs()
	}
	if err := p.probe(events); err != nil {
		return nil, err
	}
	return p, nil
}

// defaultMaxFDs leaves half the open-file limit to the rest of the
// exporter (BPF maps, sockets, procfs reads).
func defaultMaxFDs() int {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err == nil && lim.Cur/2 < DefaultMaxFDs {
		return max(int(lim.Cur/2), 1)
	}
	return DefaultMaxFDs
}

// probe opens each event on the calling thread once, so that events the
// machine lacks (every hardware event in a VM without a virtual PMU) are
// reported once at start-up instead of failing for every process, and
// finds out whether the kernel takes inherit_thread.
func (p *Profiler) probe(events []reading.PerfEvent) error {
	errs := make([]error, len(events))
	for _, inheritThread := range []bool{true, false} {
		p.inheritThread = inheritThread
		allEINVAL := true
		for i, ev := range events {
			fd, err := p.ops.open(ev, 0, inheritThread)
			errs[i] = err
			if err == nil {
				_ = p.ops.close(fd)
				continue
			}
			if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
				return fmt.Errorf("profiling: perf_event_open %s: %w (needs root, or CAP_PERFMON with kernel.perf_event_paranoid <= 1)", ev.Name, err)
			}
			allEINVAL = allEINVAL && errors.Is(err, unix.EINVAL)
		}
		// A kernel before 5.13 rejects the inherit_thread bit with EINVAL
		// for every event, whatever the event.
		if !inheritThread || !allEINVAL {
			break
		}
	}
	var failed []error
	for i, ev := range events {
		if errs[i] != nil {
			failed = append(failed, fmt.Errorf("%s: %w", ev.Name, errs[i]))
			p.unavailable[ev.Name] = errs[i].Error()
			p.log.Info("perf event unavailable, not counted", zap.String("event", ev.Name), zap.String("kind", ev.Kind), zap.Error(errs[i]))
			continue
		}
		p.events = append(p.events, ev)
		p.usable = append(p.usable, true)
	}
	if len(p.events) == 0 {
		return fmt.Errorf("profiling: none of the configured perf events can be counted here: %w", errors.Join(failed...))
	}
	if !p.inheritThread {
		p.log.Info("kernel lacks perf inherit_thread (Linux 5.13+): new threads of profiled processes are picked up at the next scan")
	}
	return nil
}

// Events returns the events being counted.
func (p *Profiler) Events() []reading.PerfEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	var evs []reading.PerfEvent
	for i, ev := range p.events {
		if p.usable[i] {
			evs = append(evs, ev)
		}
	}
	return evs
}

// Unavailable returns the configured events this machine cannot count,
// with the kernel's reason.
func (p *Profiler) Unavailable() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.unavailable))
	for k, v := range p.unavailable {
		out[k] = v
	}
	return out
}

// Stats returns the profiler's current state.
func (p *Profiler) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{Profiled: len(p.procs), FDs: p.fds, Waiting: len(p.waiting), Skipped: p.skipped, InheritThread: p.inheritThread}
}

// Scan brings the set of profiled processes in line with procs, which must
// be the accounting source's complete list (reading.Usage.Processes): it
// opens counters for opted-in processes not yet counted, and closes those
// of processes that are absent from procs or reported with Alive false.
// Their final counts are returned, with Alive false, exactly once, so the
// caller can keep them in the process's cgroup after it is gone.
func (p *Profiler) Scan(procs []reading.ProcessUsage) []reading.ProcessCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	live := make(map[reading.ProcKey]*reading.ProcessUsage, len(procs))
	for i := range procs {
		if procs[i].Alive {
			live[procs[i].Key] = &procs[i]
		}
	}

	var exited []reading.ProcessCounts
	for key, pr := range p.procs {
		if live[key] == nil {
			exited = append(exited, p.finish(pr))
		}
	}
	for key := range p.optIn {
		if live[key] == nil {
			delete(p.optIn, key)
			delete(p.waiting, key)
		}
	}

	for i := range procs {
		pu := &procs[i]
		if !pu.Alive {
			continue
		}
		if pr := p.procs[pu.Key]; pr != nil {
			// A process can be moved to another cgroup; its counts follow
			// it from the next interval on.
			pr.cgroup, pr.comm = pu.Cgroup, pu.Comm
			if !p.inheritThread {
				p.rescanThreads(pr)
			}
			continue
		}
		if !p.optedIn(pu) {
			continue
		}
		p.start(pu)
	}
	slices.SortFunc(exited, byPID)
	return exited
}

// optedIn reads and caches the process's opt-in decision, so that the
// environment of each process is read once rather than every scan.
//
// A decision is keyed by the process and its comm, because the key
// survives exec and the environment does not: a process scanned between
// fork and exec shows its parent's environment, and one scanned during
// exec an empty one. Re-reading when the comm changes catches the common
// launch paths (slurmstepd or a shell forking, then exec'ing the job; env
// VAR=1 cmd); an empty environment is never cached, as only kernel threads
// keep one, and reading theirs costs next to nothing. A process that execs
// an executable of the same name with a new environment keeps its first
// decision.
func (p *Profiler) optedIn(pu *reading.ProcessUsage) bool {
	if d, ok := p.optIn[pu.Key]; ok && d.comm == pu.Comm {
		return d.in
	}
	in, empty, err := p.filter.matchPID(p.procfs, int(pu.Key.PID))
	switch {
	case err != nil && procpid.Vanished(err):
		return false
	case err != nil:
		// Unreadable (another user's process without privileges):
		// decided as not opted in until its comm changes.
		p.log.Debug("cannot read environment", zap.Uint32("pid", pu.Key.PID), zap.Error(err))
	case empty:
		return false
	}
	p.optIn[pu.Key] = decision{comm: pu.Comm, in: in}
	return in
}

// start opens the counters of every thread of a newly opted-in process,
// within the limits.
func (p *Profiler) start(pu *reading.ProcessUsage) {
	if len(p.procs) >= p.maxPro {
		p.skip(pu, "max processes reached")
		return
	}
	tids, err := p.threads(pu.Key.PID)
	if err != nil {
		if !procpid.Vanished(err) {
			p.log.Debug("cannot list threads", zap.Uint32("pid", pu.Key.PID), zap.Error(err))
		}
		return
	}
	if p.fds+len(tids)*p.usableCount() > p.maxFDs {
		p.skip(pu, "max file descriptors reached")
		return
	}
	pr := &proc{
		key:     pu.Key,
		comm:    pu.Comm,
		cgroup:  pu.Cgroup,
		threads: make(map[int][]int, len(tids)),
		base:    make([]float64, len(p.events)),
		has:     make([]bool, len(p.events)),
	}
	for _, tid := range tids {
		p.openThread(pr, tid)
	}
	if len(pr.threads) == 0 {
		// Every thread was gone, or the process cannot be counted at all
		// (EACCES): decided, so it is not retried every scan.
		p.optIn[pu.Key] = decision{comm: pu.Comm}
		return
	}
	p.procs[pu.Key] = pr
	delete(p.waiting, pu.Key)
	p.log.Debug("profiling process", zap.Uint32("pid", pu.Key.PID), zap.String("comm", pu.Comm), zap.Int("threads", len(pr.threads)))
}

// skip records an opted-in process left out by a limit. It stays opted
// in, so it is counted once a slot frees.
func (p *Profiler) skip(pu *reading.ProcessUsage, why string) {
	if !p.waiting[pu.Key] {
		p.waiting[pu.Key] = true
		p.skipped++
	}
	if !p.warnedLimit {
		p.warnedLimit = true
		p.log.Warn("opted-in process not profiled (logged once)", zap.String("reason", why),
			zap.Uint32("pid", pu.Key.PID), zap.Int("max_processes", p.maxPro), zap.Int("max_fds", p.maxFDs))
	}
}

func (p *Profiler) usableCount() int {
	n := 0
	for _, u := range p.usable {
		if u {
			n++
		}
	}
	return n
}

// openThread opens every usable event on one thread. Counters that could
// not be opened stay -1; a thread with none open is not recorded.
func (p *Profiler) openThread(pr *proc, tid int) {
	fds := make([]int, len(p.events))
	opened := 0
	for i, ev := range p.events {
		fds[i] = -1
		if !p.usable[i] {
			continue
		}
		if p.fds >= p.maxFDs {
			p.skipThread(pr, tid)
			break
		}
		fd, err := p.ops.open(ev, tid, p.inheritThread)
		switch {
		case err == nil:
			fds[i] = fd
			opened++
			p.fds++
			pr.has[i] = true
		case errors.Is(err, unix.ESRCH):
			// The thread exited since the task list was read.
			p.closeFDs(fds)
			return
		case unsupported(err):
			p.usable[i] = false
			p.unavailable[ev.Name] = err.Error()
			p.log.Info("perf event unavailable, no longer counted", zap.String("event", ev.Name), zap.Error(err))
		default:
			p.log.Debug("perf_event_open failed", zap.String("event", ev.Name), zap.Int("tid", tid), zap.Error(err))
		}
	}
	if opened > 0 {
		pr.threads[tid] = fds
	}
}

func (p *Profiler) skipThread(pr *proc, tid int) {
	if !p.warnedLimit {
		p.warnedLimit = true
		p.log.Warn("thread of a profiled process not counted: max file descriptors reached (logged once)",
			zap.Uint32("pid", pr.key.PID), zap.Int("tid", tid), zap.Int("max_fds", p.maxFDs))
	}
}

// rescanThreads, without inherit_thread, opens counters on threads that
// appeared since the last scan and folds exited threads into base, so
// that their descriptors do not pile up in a process that churns threads.
func (p *Profiler) rescanThreads(pr *proc) {
	tids, err := p.threads(pr.key.PID)
	if err != nil {
		return // exited: finished at the next scan
	}
	present := make(map[int]bool, len(tids))
	for _, tid := range tids {
		present[tid] = true
		if _, ok := pr.threads[tid]; !ok {
			p.openThread(pr, tid)
		}
	}
	for tid, fds := range pr.threads {
		if present[tid] {
			continue
		}
		for i, fd := range fds {
			if fd < 0 {
				continue
			}
			if c, err := p.ops.read(fd); err == nil {
				pr.base[i] += c.Scaled()
			}
		}
		p.closeFDs(fds)
		delete(pr.threads, tid)
	}
}

// threads lists the process's threads from <procfs>/<pid>/task.
func (p *Profiler) threads(pid uint32) ([]int, error) {
	ents, err := os.ReadDir(filepath.Join(p.procfs, strconv.FormatUint(uint64(pid), 10), "task"))
	if err != nil {
		return nil, fmt.Errorf("list threads of pid %d: %w", pid, err)
	}
	tids := make([]int, 0, len(ents))
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	// The leader first: threads it creates while the rest are opened are
	// then counted through inheritance rather than missed.
	slices.SortFunc(tids, func(a, b int) int {
		switch {
		case a == int(pid):
			return -1
		case b == int(pid):
			return 1
		}
		return a - b
	})
	return tids, nil
}

// counts sums the process's counters. A counter of an exited thread still
// reads its final value, so this is also the final count of a process that
// exited.
func (p *Profiler) counts(pr *proc) map[string]float64 {
	sum := slices.Clone(pr.base)
	for _, fds := range pr.threads {
		for i, fd := range fds {
			if fd < 0 {
				continue
			}
			c, err := p.ops.read(fd)
			if err != nil {
				p.log.Debug("read perf counter", zap.Uint32("pid", pr.key.PID), zap.String("event", p.events[i].Name), zap.Error(err))
				continue
			}
			sum[i] += c.Scaled()
		}
	}
	m := make(map[string]float64, len(sum))
	for i, v := range sum {
		if pr.has[i] {
			m[p.events[i].Name] = v
		}
	}
	return m
}

// finish reads a process's final counts and closes its counters.
func (p *Profiler) finish(pr *proc) reading.ProcessCounts {
	pc := reading.ProcessCounts{Key: pr.key, Comm: pr.comm, Cgroup: pr.cgroup, Counts: p.counts(pr)}
	for _, fds := range pr.threads {
		p.closeFDs(fds)
	}
	delete(p.procs, pr.key)
	return pc
}

func (p *Profiler) closeFDs(fds []int) {
	for i, fd := range fds {
		if fd >= 0 {
			_ = p.ops.close(fd)
			fds[i] = -1
			p.fds--
		}
	}
}

// Read returns the cumulative counts of every process being profiled,
// sorted by PID. Exited processes' final counts come from Scan, not here.
func (p *Profiler) Read() []reading.ProcessCounts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]reading.ProcessCounts, 0, len(p.procs))
	for _, pr := range p.procs {
		out = append(out, reading.ProcessCounts{Key: pr.key, Comm: pr.comm, Cgroup: pr.cgroup, Counts: p.counts(pr), Alive: true})
	}
	slices.SortFunc(out, byPID)
	return out
}

func byPID(a, b reading.ProcessCounts) int {
	if a.Key.PID != b.Key.PID {
		return int(a.Key.PID) - int(b.Key.PID)
	}
	switch {
	case a.Key.StartTime < b.Key.StartTime:
		return -1
	case a.Key.StartTime > b.Key.StartTime:
		return 1
	}
	return 0
}

// Close closes every counter. Later calls do nothing.
func (p *Profiler) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	for _, pr := range p.procs {
		for _, fds := range pr.threads {
			p.closeFDs(fds)
		}
	}
	p.procs = nil
	return nil
}
