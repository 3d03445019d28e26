// Package bpfloader loads wattrace's BPF programs, attaches them and turns
// what they report into the cumulative counters of package usage.
package bpfloader

import (
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Options configures Load.
type Options struct {
	Hierarchy cgroup.Hierarchy
	Log       *zap.Logger
	// BTFPath is the kernel's BTF; empty means /sys/kernel/btf/vmlinux.
	BTFPath string
	// Keep, when set, is a BPF file system (/sys/fs/bpf) under which the
	// loaded programs and maps are kept for the boot and reused by later
	// processes of the same user (keep.go); Accounting.Kept says how
	// they were had.
	Keep string
	// editSpec, in tests, changes the object before it is loaded (a
	// program the kernel refuses).
	editSpec func(*ebpf.CollectionSpec)
}

// hierarchy values understood by the BPF programs (bpf/accounting.bpf.c).
const (
	hierV2 uint32 = 0
	hierV1 uint32 = 1
)

// Load loads and attaches the accounting programs. The error names the
// cause when it is one a user can fix: missing capability, missing BTF, or
// a verifier rejection (whose log tail is logged at debug level).
func Load(o Options) (*Accounting, error) {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	btfPath := o.BTFPath
	if btfPath == "" {
		btfPath = "/sys/kernel/btf/vmlinux"
	}
	if _, err := os.Stat(btfPath); err != nil {
		return nil, fmt.Errorf("kernel BTF not available at %s (the kernel needs CONFIG_DEBUG_INFO_BTF=y): %w", btfPath, err)
	}
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		log.Debug("could not raise RLIMIT_MEMLOCK", zap.Error(err))
	}

	spec, err := loadAccounting()
	if err != nil {
		return nil, err
	}
	hier, subsys, err := hierarchyConsts(o.Hierarchy.Kind)
	if err != nil {
		return nil, err
	}
	if err := spec.Variables[accountingVarHierarchy].Set(hier); err != nil {
		return nil, fmt.Errorf("set hierarchy: %w", err)
	}
	if err := spec.Variables[accountingVarV1Subsys].Set(subsys); err != nil {
		return nil, fmt.Errorf("set v1_subsys: %w", err)
	}
	if o.editSpec != nil {
		o.editSpec(spec)
	}

	a := &Accounting{log: log, state: newState(), kept: Kept{How: KeptNo}, hier: o.Hierarchy}
	if o.Keep == "" {
		err = a.assignLoaded(spec)
	} else {
		err = a.assignKept(o.Keep, spec, hier, subsys)
	}
	if err != nil {
		return nil, explainLoadError(err, log)
	}
	for _, h := range []struct {
		name string
		prog *ebpf.Program
	}{
		{"tp_btf/sched_process_exit", a.objs.TaskExit},
		{"tp_btf/sched_process_free", a.objs.TaskFree},
		{"tp_btf/sched_process_fork", a.objs.TaskFork},
		{"tp_btf/cgroup_attach_task", a.objs.TaskMove},
		{"tp_btf/sched_switch", a.objs.TaskDead},
	} {
		l, err := link.AttachTracing(link.TracingOptions{Program: h.prog})
		if err != nil {
			a.closeHooks()
			a.objs.Close()
			a.release()
			return nil, explainLoadError(fmt.Errorf("attach %s: %w", h.name, err), log)
		}
		a.hooks = append(a.hooks, l)
	}
	a.iter, err = link.AttachIter(link.IterOptions{Program: a.objs.DumpTask})
	if err != nil {
		a.closeHooks()
		a.objs.Close()
		a.release()
		return nil, explainLoadError(fmt.Errorf("attach iter/task: %w", err), log)
	}
	if a.refused != nil {
		log.Debug("BPF accounting loaded without the scoped read", zap.Error(a.refused))
	}
	log.Info("BPF accounting loaded",
		zap.String("hierarchy", string(o.Hierarchy.Kind)), zap.String("how", a.kept.How), zap.String("kept", a.kept.Dir),
		zap.Uint32("v1_subsys", subsys))
	return a, nil
}

// hierarchyConsts maps a hierarchy to the programs' constants. A v1
// controller's index in task->cgroups->subsys[] is the kernel's enum
// cgroup_subsys_id, which depends on the kernel's config: read it from BTF.
func hierarchyConsts(k cgroup.Kind) (uint32, uint32, error) {
	switch k {
	case cgroup.V2:
		return hierV2, 0, nil
	case cgroup.CPUAcct, cgroup.CPU:
		// /proc/cgroups lists the built-in controllers in the enum's
		// order and costs nothing; parsing the kernel's BTF costs ~13 ms
		// of CPU, which `wattrace measure` pays on every start.
		if idx, ok := procCgroupsIndex("/proc/cgroups", string(k)); ok {
			return hierV1, idx, nil
		}
		idx, err := subsysIndex(string(k) + "_cgrp_id")
		if err != nil {
			return 0, 0, err
		}
		return hierV1, idx, nil
	}
	return 0, 0, fmt.Errorf("unknown cgroup hierarchy %q", k)
}

// procCgroupsIndex is controller's line number in /proc/cgroups, which
// the kernel prints for_each_subsys, in enum cgroup_subsys_id order (every
// built-in controller is listed, enabled or not).
func procCgroupsIndex(path, controller string) (uint32, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	idx := uint32(0)
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Fields(line); len(f) > 0 && f[0] == controller {
			return idx, true
		}
		idx++
	}
	return 0, false
}

func subsysIndex(name string) (uint32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return 0, fmt.Errorf("load kernel BTF: %w", err)
	}
	var e *btf.Enum
	if err := spec.TypeByName("cgroup_subsys_id", &e); err != nil {
		return 0, fmt.Errorf("kernel BTF has no enum cgroup_subsys_id: %w", err)
	}
	for _, v := range e.Values {
		if v.Name == name {
			return uint32(v.Value), nil
		}
	}
	return 0, fmt.Errorf("kernel has no %s (controller not built in)", name)
}

// explainVerifierError logs a verifier rejection's last 20 lines at debug
// level and says how to see them; ok is false for other errors.
func explainVerifierError(err error, log *zap.Logger) (explained error, ok bool) {
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		return err, false
	}
	for _, l := range ve.Log[max(0, len(ve.Log)-20):] {
		log.Debug("verifier", zap.String("line", l))
	}
	return fmt.Errorf("BPF verifier rejected the program (run with --log.level=debug for the verifier log): %w", err), true
}

// explainLoadError turns a load failure of the accounting programs into
// advice: the verifier's log, missing privileges or kernel features.
func explainLoadError(err error, log *zap.Logger) error {
	if e, ok := explainVerifierError(err, log); ok {
		return e
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return fmt.Errorf("not permitted to load BPF programs: run as root or grant CAP_BPF and CAP_PERFMON: %w", err)
	}
	if errors.Is(err, ebpf.ErrNotSupported) {
		return fmt.Errorf("kernel lacks a BPF feature wattrace needs (task iterator, task storage, tp_btf and atomic cmpxchg: Linux 5.12 or later): %w", err)
	}
	return fmt.Errorf("load BPF accounting: %w", err)
}

// newCollection loads spec. Where the kernel refuses it whole, the
// optional programs (optionalPrograms) are left out and the others are
// loaded without them; refused is then the first error, and err is that
// error when the others fail too.
func newCollection(spec *ebpf.CollectionSpec) (coll *ebpf.Collection, refused, err error) {
	coll, err = ebpf.NewCollection(spec)
	if err == nil {
		return coll, nil, nil
	}
	without := spec.Copy()
	for _, name := range optionalPrograms {
		delete(without.Programs, name)
	}
	if len(without.Programs) == len(spec.Programs) {
		return nil, nil, err
	}
	coll, err2 := ebpf.NewCollection(without)
	if err2 != nil {
		return nil, nil, err
	}
	return coll, err, nil
}

// optionalPrograms are the accounting's programs that a kernel may lack
// the features of: the accounting works without them, and Load leaves
// their field nil.
var optionalPrograms = []string{accountingProgDumpCgroup}

// assignLoaded loads spec (newCollection) into a's objects.
func (a *Accounting) assignLoaded(spec *ebpf.CollectionSpec) error {
	coll, refused, err := newCollection(spec)
	if err != nil {
		return err
	}
	a.refused = refused
	defer coll.Close() // what was not assigned
	return a.assign(coll)
}

// assign moves the collection's programs and maps into a's objects (as
// Collection.Assign, which requires every program): an optional program
// missing from coll stays nil.
func (a *Accounting) assign(coll *ebpf.Collection) error {
	progs := reflect.ValueOf(&a.objs.accountingPrograms).Elem()
	for i := range progs.NumField() {
		name := progs.Type().Field(i).Tag.Get("ebpf")
		p := coll.Programs[name]
		if p == nil {
			if slices.Contains(optionalPrograms, name) {
				continue
			}
			a.objs.accountingPrograms.Close()
			return fmt.Errorf("missing program %q", name)
		}
		progs.Field(i).Set(reflect.ValueOf(p))
		delete(coll.Programs, name)
	}
	if err := coll.Assign(&a.objs.accountingMaps); err != nil {
		a.objs.accountingPrograms.Close()
		return err
	}
	return nil
}

// Accounting is the BPF accounting source; it implements stats.Accounting.
// Read must not be called concurrently.
type Accounting struct {
	objs  accountingObjects
	iter  *link.Iter
	hooks []link.Link // exit, free, fork, move and dead, in that order
	log   *zap.Logger
	state *state
	// Buffers reused across reads so a read allocates little.
	buf       []byte // the task iterator's, one chunk (readTasks)
	procExits []procExitRec
	cgExits   []cgExitRec
	// The exit maps are read in batches (mapread.go).
	procExitReader mapReader[accountingProcKey, accountingProcExit]
	cgExitReader   mapReader[uint64, accountingCounters]
	delKeys        []accountingProcKey
	// kept says how the objects were had (keep.go); keepLock is the kept
	// copy's lock, held until Close.
	kept     Kept
	keepLock *os.File
	// refused is why the kernel refused the optional programs, where it
	// did (newCollection).
	refused error
	// hier is the hierarchy that keys workloads: a Scope reads one of its
	// cgroups.
	hier cgroup.Hierarchy
	// walks counts the task iterator's complete walks. Each also folded
	// the probes' per-task counters (bpf/fold.h), so the probes skip their
	// own walk after one (Probes.read).
	walks atomic.Uint64
}

// foldMaps are the maps of the probes' counters and their fold
// (bpf/fold.h), which the accounting object owns so that its task
// iterator can fold them; the probes load against these (LoadProbes with
// ProbeOptions.Accounting).
func (a *Accounting) foldMaps() map[string]*ebpf.Map {
	return map[string]*ebpf.Map{
		"pending":      a.objs.Pending,
		"proc_stats":   a.objs.ProcStats,
		"cgroup_stats": a.objs.CgroupStats,
		"probe_drops":  a.objs.ProbeDrops,
	}
}

// Mode is the accounting mode BPF accounting reports.
const Mode = "bpf"

// Mode implements stats.Accounting.
func (a *Accounting) Mode() string { return Mode }

// Close detaches the programs and frees their maps.
func (a *Accounting) Close() error {
	return errors.Join(a.iter.Close(), a.closeHooks(), a.objs.Close(), a.release())
}

func (a *Accounting) closeHooks() error {
	var errs []error
	for _, l := range a.hooks {
		errs = append(errs, l.Close())
	}
	return errors.Join(errs...)
}

// taskChunk is the buffer the task iterator is read through. A read
// returns at most the kernel's seq_file buffer (8 pages, 32 KiB); a buffer
// of twice that takes the kernel's whole, so a record is split between two
// reads only when the iterator's output is not whole records.
const taskChunk = 64 << 10

// readTasks runs the task iterator once and hands each record to fn as it
// is read. The same walk folds the probes' per-task counters (bpf/fold.h). A read may end inside a record (the kernel copies as much of
// its buffer as fits); the part is kept for the next.
func (a *Accounting) readTasks(fn func(*taskRec)) error {
	r, err := a.iter.Open()
	if err != nil {
		return fmt.Errorf("open task iterator: %w", err)
	}
	defer r.Close()
	if len(a.buf) < taskChunk {
		a.buf = make([]byte, taskChunk)
	}
	if err := streamTasks(r, a.buf, fn); err != nil {
		return err
	}
	a.walks.Add(1)
	return nil
}

// streamTasks decodes the records read from r through buf (at least one
// record long), carrying a record split between two reads over.
func streamTasks(r io.Reader, buf []byte, fn func(*taskRec)) error {
	have := 0
	for {
		n, err := r.Read(buf[have:])
		have += n
		whole := have - have%recSize
		if perr := eachTask(buf[:whole], fn); perr != nil {
			return perr
		}
		have = copy(buf, buf[whole:have])
		if errors.Is(err, io.EOF) {
			if have != 0 {
				return fmt.Errorf("task iterator ended inside a record (%d of %d bytes)", have, recSize)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read task iterator: %w", err)
		}
	}
}

// ProgramStats returns the cost of each accounting program: the hooks,
// which run in the kernel on their own, and the task iterator, which runs
// on our reads and whose cost grows with the number of tasks.
func (a *Accounting) ProgramStats() ([]reading.ProgramStat, error) {
	progs := map[string]*ebpf.Program{
		"dump_task": a.objs.DumpTask,
		"task_exit": a.objs.TaskExit,
		"task_free": a.objs.TaskFree,
		"task_fork": a.objs.TaskFork,
		"task_move": a.objs.TaskMove,
		"task_dead": a.objs.TaskDead,
	}
	// The scoped read's program, where the kernel took it: held, so its
	// cost is said too (none where only the node is read).
	if a.objs.DumpCgroup != nil {
		progs["dump_cgroup"] = a.objs.DumpCgroup
	}
	return programStats(progs)
}

func programStats(progs map[string]*ebpf.Program) ([]reading.ProgramStat, error) {
	out := make([]reading.ProgramStat, 0, len(progs))
	for name, p := range progs {
		st, err := p.Stats()
		if err != nil {
			return nil, fmt.Errorf("program %s statistics: %w", name, err)
		}
		out = append(out, reading.ProgramStat{Name: name, RunTime: st.Runtime, RunCount: st.RunCount})
	}
	return out, nil
}

// MapDrops reports the exits whose entry could not be stored because
// exited_procs or exited_cgroups was full (slots 0 and 1 of drops).
func (a *Accounting) MapDrops() ([]reading.MapDrops, error) {
	return readDrops(a.objs.Drops, "exited_procs", "exited_cgroups")
}

// readDrops sums a per-CPU drop-count array whose slot i counts the
// events the map named maps[i] had no room for.
func readDrops(m *ebpf.Map, maps ...string) ([]reading.MapDrops, error) {
	out := make([]reading.MapDrops, len(maps))
	var vals []uint64
	for slot, name := range maps {
		if err := m.Lookup(uint32(slot), &vals); err != nil {
			return nil, fmt.Errorf("read drops of %s: %w", name, err)
		}
		out[slot].Map = name
		for _, v := range vals {
			out[slot].Drops += v
		}
	}
	return out, nil
}

// EnableStats turns on the kernel's BPF run-time statistics until the
// returned closer is closed. They cost every BPF program on the host about
// 50 ns per run, which is why they are off unless asked for.
func EnableStats() (io.Closer, error) {
	fd, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		return nil, fmt.Errorf("enable BPF run-time statistics: %w", err)
	}
	return fd, nil
}
