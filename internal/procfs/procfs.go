// Package procfs is the fallback accounting source, used when the BPF
// programs cannot be loaded (no privileges, no BTF, an old kernel). It reads
// per-process counters from procfs and per-cgroup CPU from the cgroups' own
// accounting, and implements stats.Accounting.
package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/procpid"
	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// rateSlack allows for reading a counter a little before or after the
// instant its interval is timed at: no CPU counter can otherwise grow
// faster than one second per second per CPU.
const rateSlack = 1.1

// userHZ is the unit of utime and stime in /proc/PID/stat. The kernel
// reports them in USER_HZ, which is 100 on every architecture we run on
// whatever CONFIG_HZ is; github.com/prometheus/procfs assumes the same.
const userHZ = 100

// nsPerTick converts USER_HZ clock ticks to ns.
const nsPerTick = 1_000_000_000 / userHZ

// Options configures New.
type Options struct {
	// ProcfsRoot is the procfs mount point; empty means /proc.
	ProcfsRoot string
	// Hierarchy is the key hierarchy; it may be left zero when Resolver is
	// set, and must then match Resolver's.
	Hierarchy cgroup.Hierarchy
	// Resolver maps cgroup paths to ids; nil means a new one for Hierarchy.
	Resolver *cgroup.Resolver
	// Logger receives per-process read failures other than the process
	// exiting, and rejected readings; nil discards them.
	Logger *zap.Logger
	// CPUs is the number of CPUs, which bounds how fast any CPU counter can
	// grow; 0 means runtime.NumCPU().
	CPUs int
}

// Source implements stats.Accounting from procfs and cgroupfs. It is safe for
// concurrent use, though reads are serialised.
type Source struct {
	fs   procfs.FS
	root string
	kind cgroup.Kind
	res  *cgroup.Resolver
	log  *zap.Logger
	// exact is true when the hierarchy keeps a usage counter per cgroup;
	// without one (v1 cpu without cpuacct) cgroup CPU is summed from the
	// deltas of the processes seen in it, which misses processes that
	// lived and died between two reads.
	exact bool
	// cpu checks every CPU counter (the stats loop's check of the BPF
	// maps is the same), and boot, the boot time (zero when unknown),
	// bounds a counter seen for the first time.
	cpu  reading.CPUTime
	boot time.Time
	now  func() time.Time
	// tall is the source's health: it is read synchronously each
	// interval, so its Age stays 0.
	tall *sourcehealth.Tally

	mu      sync.Mutex
	gen     uint64
	procs   map[reading.ProcKey]*procState
	cgroups map[uint64]*cgState
	closed  bool
}

type procState struct {
	p       reading.ProcessUsage // as last reported
	threads map[int]uint64       // per-thread switch counts at the last read
	seen    uint64               // gen of the last read that found it
	cpu     reading.Counter
}

type cgState struct {
	parent uint64
	// usage is the cgroup's hierarchical usage at the last read.
	usage     uint64
	haveUsage bool
	// retired is the last known usage of removed children: the parent's
	// hierarchical counter keeps their usage after they are gone, and
	// subtracting it keeps that usage from turning up as the parent's own.
	retired uint64
	// cpu is the cumulative self CPU: the high-water mark of the self
	// figure usage − Σ children − retired. Keeping the mark rather than
	// adding every positive step makes jitter from reading parent and
	// children at slightly different times cancel out instead of adding up.
	cpu      uint64
	procCPU  uint64 // Σ process CPU deltas seen in this cgroup
	switches uint64 // Σ process switch deltas seen in this cgroup
	gone     bool   // removed; retired into the parent already
	// counter validates the hierarchical usage counter.
	counter reading.Counter
}

// New returns a source reading o.ProcfsRoot and the cgroups of the key
// hierarchy.
func New(o Options) (*Source, error) {
	root := o.ProcfsRoot
	if root == "" {
		root = "/proc"
	}
	res := o.Resolver
	switch {
	case res == nil && o.Hierarchy.Mount == "":
		return nil, errors.New("procfs source: no cgroup hierarchy given")
	case res == nil:
		res = cgroup.NewResolver(o.Hierarchy)
	case o.Hierarchy != (cgroup.Hierarchy{}) && o.Hierarchy != res.Hierarchy():
		return nil, fmt.Errorf("procfs source: hierarchy %+v does not match the resolver's %+v", o.Hierarchy, res.Hierarchy())
	}
	pfs, err := procfs.NewFS(root)
	if err != nil {
		return nil, fmt.Errorf("open procfs %s: %w", root, err)
	}
	log := o.Logger
	if log == nil {
		log = zap.NewNop()
	}
	if _, err := res.ID("/"); err != nil {
		return nil, fmt.Errorf("procfs source: cgroup hierarchy %+v: %w", res.Hierarchy(), err)
	}
	_, uerr := res.Usage("/")
	cpus := o.CPUs
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	var boot time.Time
	if st, err := pfs.Stat(); err == nil && st.BootTime > 0 {
		boot = time.Unix(int64(st.BootTime), 0)
	}
	tall := sourcehealth.New("procfs", sourcehealth.Options{Log: log})
	// CPU time counters of a cgroup or a process never restart: the
	// kernel gives a re-created one a new id or start time.
	cpu := reading.CPUTime{MaxRate: float64(cpus) * 1e9 * rateSlack, Rejects: tall.Rejects()}
	return &Source{
		fs:      pfs,
		cpu:     cpu,
		root:    root,
		kind:    res.Hierarchy().Kind,
		res:     res,
		log:     log,
		exact:   uerr == nil,
		boot:    boot,
		now:     time.Now,
		tall:    tall,
		procs:   map[reading.ProcKey]*procState{},
		cgroups: map[uint64]*cgState{},
	}, nil
}

// Health reports the source's state: failed reads and rejected counter
// readings (a cgroup or process counter that went back, jumped faster than
// the CPUs can run, or could not be parsed).
func (s *Source) Health() []reading.SourceHealth {
	return []reading.SourceHealth{s.tall.Health()}
}

// check validates one reading of a CPU counter (ns) taken at t: plausible
// against the counter's last accepted value, and, for a first reading, no
// more than every CPU running since boot. A rejected reading is counted
// and logged, and must not be credited.
func (s *Source) check(c *reading.Counter, v uint64, t time.Time, what string) bool {
	if c.MaxRate == 0 {
		*c = s.cpu.Counter(s.boot)
	}
	_, ok := s.cpu.Observe(c, v, t, time.Time{}, func() string { return what })
	return ok
}

// Mode implements stats.Accounting.
func (s *Source) Mode() string { return "procfs" }

// Close implements stats.Accounting.
func (s *Source) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

// nodeUsage is one cgroup found this read.
type nodeUsage struct {
	cgroup.Node
	usage uint64
	ok    bool
}

// Read implements stats.Accounting. The cgroup tree and its usage counters are
// read first, each parent before its children, so nothing is changed when
// that fails; the per-process part cannot fail once /proc is listed.
func (s *Source) Read() (reading.Usage, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return reading.Usage{}, errors.New("procfs source: read after close")
	}
	r, err := s.read(s.now())
	s.tall.Read(err)
	return r, err
}

func (s *Source) read(now time.Time) (reading.Usage, error) {
	nodes, err := s.res.Scan()
	if err != nil {
		return reading.Usage{}, err
	}
	present := make(map[uint64]nodeUsage, len(nodes))
	for _, n := range nodes {
		nu := nodeUsage{Node: n}
		if s.exact {
			// A missing file means the cgroup went away since the walk; it
			// is handled like one removed before it. Any other failure is
			// a reading that could not be taken.
			nu.usage, err = s.res.Usage(n.Path)
			nu.ok = err == nil
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.tall.Reject(reading.Reject(reading.Unreadable, 0, "%v", err), n.Path)
			}
		}
		present[n.ID] = nu
	}
	procs, err := s.fs.AllProcs()
	if err != nil {
		return reading.Usage{}, fmt.Errorf("list processes in %s: %w", s.root, err)
	}

	s.gen++
	var out reading.Usage
	touched := map[uint64]bool{}
	ids := map[string]uint64{} // cgroup path → id, memoised for this read
	for _, p := range procs {
		rp, ok := s.readProc(p, ids, now)
		if !ok {
			continue
		}
		out.Processes = append(out.Processes, rp)
		touched[rp.Cgroup] = true
	}
	for k, st := range s.procs {
		if st.seen != s.gen {
			st.p.Alive = false
			out.Processes = append(out.Processes, st.p)
			delete(s.procs, k)
		}
	}

	s.updateCgroups(nodes, present, now)
	for id, st := range s.cgroups {
		_, here := present[id]
		if !here && !touched[id] {
			delete(s.cgroups, id)
			continue
		}
		if id == 0 {
			// Processes whose cgroup could not be resolved; there is no
			// such cgroup to report.
			continue
		}
		cpu := st.cpu
		if !s.exact {
			cpu = st.procCPU
		}
		out.Cgroups = append(out.Cgroups, reading.CgroupUsage{ID: id, CPUNs: cpu, Switches: st.switches})
	}
	return out, nil
}

// updateCgroups folds this read's usage counters into the per-cgroup state.
//
// A cgroup's own CPU is its counter minus its children's, so a child whose
// counter could not be read, or was rejected, would hand its whole history
// to the parent: the parent's figure is then held for this read, and the
// child's and parent's both resume from their next good readings.
func (s *Source) updateCgroups(nodes []cgroup.Node, present map[uint64]nodeUsage, now time.Time) {
	// Retire cgroups removed since the last read into their parents before
	// computing anyone's self figure: the parents' counters include them.
	for id, st := range s.cgroups {
		if _, here := present[id]; here || st.gone {
			continue
		}
		st.gone = true
		if p, ok := s.cgroups[st.parent]; ok && st.haveUsage {
			if _, parentHere := present[st.parent]; parentHere {
				p.retired += st.usage
			}
		}
	}
	for _, n := range nodes {
		st, ok := s.cgroups[n.ID]
		if !ok {
			st = &cgState{}
			s.cgroups[n.ID] = st
		}
		// A state made for a process whose cgroup appeared after the walk
		// was marked gone above; it is here now.
		st.parent, st.gone = n.Parent, false
	}
	if !s.exact {
		return
	}
	children := make(map[uint64]uint64, len(nodes))
	held := map[uint64]bool{}
	for _, n := range nodes {
		nu := present[n.ID]
		if nu.ok && !s.check(&s.cgroups[n.ID].counter, nu.usage, now, n.Path) {
			nu.ok = false
			present[n.ID] = nu
		}
		switch {
		case n.Parent == 0:
		case nu.ok:
			children[n.Parent] += nu.usage
		default:
			held[n.Parent] = true
		}
	}
	for _, n := range nodes {
		nu := present[n.ID]
		if !nu.ok || held[n.ID] {
			continue
		}
		st := s.cgroups[n.ID]
		st.usage, st.haveUsage = nu.usage, true
		var self uint64
		if sub := children[n.ID] + st.retired; nu.usage > sub {
			self = nu.usage - sub
		}
		st.cpu = max(st.cpu, self)
	}
}

// readProc reads one process and updates its state. It returns false for a
// process that has vanished, or that could not be read and is not known.
func (s *Source) readProc(p procfs.Proc, ids map[string]uint64, now time.Time) (reading.ProcessUsage, bool) {
	stat, err := p.Stat()
	if err != nil {
		if procpid.Vanished(err) {
			return reading.ProcessUsage{}, false
		}
		s.log.Debug("read process stat", zap.Int("pid", p.PID), zap.Error(err))
		// Without the stat there is no key; keep whatever we know under
		// this pid, or it would be reported dead and later counted anew.
		for _, st := range s.procs {
			if st.p.Key.PID == uint32(p.PID) {
				st.seen = s.gen
				return st.p, true
			}
		}
		return reading.ProcessUsage{}, false
	}
	key := reading.ProcKey{PID: uint32(p.PID), StartTime: stat.Starttime}
	st := s.procs[key]
	threads, err := s.threadSwitches(p.PID, stat.NumThreads)
	if err != nil {
		return s.keep(st, p.PID, err)
	}
	cg, err := s.procCgroup(p.PID, ids)
	if err != nil {
		return s.keep(st, p.PID, err)
	}
	if cg == 0 && st != nil {
		// The cgroup could not be resolved (removed since the process
		// file was read): the last known one is the best guess.
		cg = st.p.Cgroup
	}
	return s.update(key, st, stat, threads, cg, now), true
}

// keep handles a process whose files failed to read after its stat: gone if
// it vanished, else reported with its last counters, if known, rather than
// dropped, which would read as an exit.
func (s *Source) keep(st *procState, pid int, err error) (reading.ProcessUsage, bool) {
	if procpid.Vanished(err) {
		return reading.ProcessUsage{}, false
	}
	s.log.Debug("read process", zap.Int("pid", pid), zap.Error(err))
	if st == nil {
		return reading.ProcessUsage{}, false
	}
	st.seen = s.gen
	return st.p, true
}

func (s *Source) update(key reading.ProcKey, st *procState, stat procfs.ProcStat, threads map[int]uint64, cg uint64, now time.Time) reading.ProcessUsage {
	if st == nil {
		st = &procState{p: reading.ProcessUsage{Key: key}}
		s.procs[key] = st
	}
	st.seen = s.gen
	// utime+stime of the thread group include its exited threads, so this
	// is the whole process. A reading that goes back or grows faster than
	// the CPUs can run is not credited; the max keeps the counter where it
	// was whatever the validation's baseline does.
	cpu := st.p.CPUNs
	if raw := (uint64(stat.UTime) + uint64(stat.STime)) * nsPerTick; s.check(&st.cpu, raw, now, "/proc/"+strconv.Itoa(int(key.PID))+"/stat") {
		cpu = max(cpu, raw)
	}
	dCPU := cpu - st.p.CPUNs
	// Switches are kept per thread: a thread's count goes when it exits,
	// so the sum over live threads is not monotonic, but the sum of every
	// thread's increases is. A tid counting less than before is a new
	// thread that reused the id.
	var dSw uint64
	for tid, n := range threads {
		if old, ok := st.threads[tid]; ok && n >= old {
			dSw += n - old
		} else {
			dSw += n
		}
	}
	st.threads = threads
	st.p.Comm = stat.Comm
	st.p.Cgroup = cg
	st.p.CPUNs = cpu
	st.p.Switches += dSw
	st.p.CPU = int(stat.Processor)
	st.p.Alive = true

	c, ok := s.cgroups[cg]
	if !ok {
		c = &cgState{}
		s.cgroups[cg] = c
	}
	c.procCPU += dCPU
	c.switches += dSw
	return st.p
}

// procCgroup returns the id, in the key hierarchy, of pid's cgroup, or 0 when
// the file names no cgroup of that hierarchy or the cgroup cannot be found.
// Only failing to read the process's file is an error.
func (s *Source) procCgroup(pid int, ids map[string]uint64) (uint64, error) {
	path := filepath.Join(s.root, strconv.Itoa(pid), "cgroup")
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	rel, ok := cgroup.ProcCgroupPath(data, s.kind)
	if !ok {
		return 0, nil
	}
	id, ok := ids[rel]
	if !ok {
		// A failure is memoised as 0 too: every process of a removed
		// cgroup would fail the same way.
		id, _ = s.res.ID(rel)
		ids[rel] = id
	}
	return id, nil
}

// threadSwitches returns voluntary + involuntary context switches of each
// live thread of pid. /proc/PID/status counts the group leader's switches
// only, so a multi-threaded process is read per thread from task/; a
// single-threaded one costs just its status file.
func (s *Source) threadSwitches(pid, nthreads int) (map[int]uint64, error) {
	dir := filepath.Join(s.root, strconv.Itoa(pid))
	if nthreads <= 1 {
		n, err := readSwitches(filepath.Join(dir, "status"))
		if err != nil {
			return nil, err
		}
		return map[int]uint64{pid: n}, nil
	}
	taskDir := filepath.Join(dir, "task")
	f, err := os.Open(taskDir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", taskDir, err)
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", taskDir, err)
	}
	out := make(map[int]uint64, len(names))
	for _, name := range names {
		tid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		n, err := readSwitches(filepath.Join(taskDir, name, "status"))
		if err != nil {
			if procpid.Vanished(err) {
				continue // the thread exited
			}
			return nil, err
		}
		out[tid] = n
	}
	return out, nil
}

func readSwitches(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	n, err := parseSwitches(data)
	if err != nil {
		return 0, fmt.Errorf("parse %s: %w", path, err)
	}
	return n, nil
}

// parseSwitches returns voluntary_ctxt_switches + nonvoluntary_ctxt_switches
// from a status file. It parses just those two lines: this runs for every
// thread on every read, and procfs.Proc.NewStatus parses everything.
func parseSwitches(data []byte) (uint64, error) {
	var sum uint64
	var found [2]bool // voluntary, nonvoluntary: a repeated line must not pass for both
	for len(data) > 0 {
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		key, val, ok := bytes.Cut(line, []byte(":"))
		if !ok || (string(key) != "voluntary_ctxt_switches" && string(key) != "nonvoluntary_ctxt_switches") {
			continue
		}
		v, err := strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", key, err)
		}
		which := 0
		if string(key) == "nonvoluntary_ctxt_switches" {
			which = 1
		}
		if found[which] {
			return 0, fmt.Errorf("%s given twice", key)
		}
		found[which] = true
		if sum+v < sum {
			return 0, fmt.Errorf("context switch counts overflow: %d + %d", sum, v)
		}
		sum += v
	}
	if !found[0] || !found[1] {
		return 0, fmt.Errorf("want voluntary and nonvoluntary context switches, found voluntary=%v nonvoluntary=%v", found[0], found[1])
	}
	return sum, nil
}
