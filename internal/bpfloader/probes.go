package bpfloader

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// hook is one program and the tracepoint it attaches to. args, when set,
// are the tracepoint's arguments as the program reads them ("*folio" is a
// pointer to struct folio; "" matches anything), checked against the
// kernel's BTF so that a tracepoint whose arguments changed is not read
// with the wrong layout.
type hook struct {
	prog, tracepoint string
	args             []string
}

// probeDef is one probe: the hooks of the first variant whose tracepoints
// the kernel has are loaded, all or none.
type probeDef struct {
	name     string
	variants [][]hook
}

var probeDefs = []probeDef{
	{reading.ProbePageCacheRead, [][]hook{{{"pc_get_pages", "mm_filemap_get_pages", []string{"*address_space", "", ""}}}}},
	{reading.ProbePageCacheAdd, [][]hook{{{"pc_add", "mm_filemap_add_to_page_cache", []string{"*folio"}}}}},
	{reading.ProbePageCacheDirty, [][]hook{
		{{"pc_dirty_folio", "writeback_dirty_folio", []string{"*folio", "*address_space"}}},
		{{"pc_dirty_page", "writeback_dirty_page", []string{"*page", "*address_space"}}},
	}},
	{reading.ProbeSoftirq, [][]hook{{
		{"softirq_in", "softirq_entry", []string{""}},
		{"softirq_out", "softirq_exit", []string{""}},
	}}},
	{reading.ProbeBlock, [][]hook{{{"blk_bio_queue", "block_bio_queue", []string{"*bio"}}}}},
	{reading.ProbeNet, [][]hook{{
		{"net_send", "sock_send_length", []string{"*sock", "", ""}},
		{"net_recv", "sock_recv_length", []string{"*sock", "", ""}},
	}}},
	{reading.ProbeCounters, [][]hook{{{"counters_switch", "sched_switch", []string{"", "*task_struct", "*task_struct", ""}}}}},
}

// ProbeNames names every probe, in the order of probeDefs: what
// ProbeOptions.Disable (collector.probes.disable) takes. Every list of the
// probes is this one (TestProbeNamesEverywhere).
func ProbeNames() []string {
	out := make([]string, len(probeDefs))
	for i, d := range probeDefs {
		out[i] = d.name
	}
	return out
}

// ProbeOptions configures LoadProbes.
type ProbeOptions struct {
	Hierarchy cgroup.Hierarchy
	Log       *zap.Logger
	// Disable names probes not to load.
	Disable []string
	// Counters are the perf events read at every context switch, at most
	// MaxCounters; nil means DefaultCounters. Events the CPU lacks are left
	// out; when none opens, nothing runs at context switches.
	Counters []CounterEvent

	// Accounting, when set, is the BPF accounting whose task iterator
	// folds the probes' per-task counters as it walks the tasks for the
	// CPU accounting: the probes load against its fold maps and, when it
	// has walked since their last read, do not walk the tasks again. It
	// must stay open while the probes are. Without it the probes walk the
	// tasks themselves at each read (fold_tasks).
	Accounting *Accounting

	// defs replaces probeDefs in tests.
	defs []probeDef
}

// Probes are the optional kernel probes. Read and Forget must not be
// called concurrently.
type Probes struct {
	log      *zap.Logger
	maps     map[string]*ebpf.Map
	colls    []*ebpf.Collection
	links    []link.Link
	progs    map[string]*ebpf.Program // attached, by program name
	active   []string
	counters *counterSet
	foldIter *link.Iter // fold_tasks, run before a read the accounting's walk did not precede (probes_fold.go)
	// acc is ProbeOptions.Accounting; accWalks its walk count at the last
	// read.
	acc      *Accounting
	accWalks uint64
	// The counter maps are read in batches (mapread.go); a read is not
	// safe for concurrent use, as it never was (the stats loop reads).
	procReader mapReader[probesProcKey, probesStats]
	cgReader   mapReader[uint64, probesStats]
}

// sharedMaps is every map the hooks write to. They are created once and
// handed to each hook's load as replacements, so that every hook loads and
// attaches on its own, and fails on its own, against the same maps. (One
// object rather than several: the maps and the logic are shared, and one
// source keeps them in step; the per-hook load is what isolates failures.)
var sharedMaps = []string{
	"proc_stats", "cgroup_stats", "probe_drops", "softirq_node",
	"softirq_started", "pending", "counter_lasts",
	"counter_events0", "counter_events1", "counter_events2", "counter_events3",
}

// disabledProbes checks the names of the probes to disable against those
// that exist: a misspelt name must not leave a probe running.
func disabledProbes(names []string) (map[string]bool, error) {
	known := map[string]bool{reading.ProbeCounters: true}
	for _, d := range probeDefs {
		known[d.name] = true
	}
	disabled := map[string]bool{}
	for _, n := range names {
		if !known[n] {
			return nil, fmt.Errorf("unknown probe %q to disable: allowed %s", n, strings.Join(ProbeNames(), ", "))
		}
		disabled[n] = true
	}
	return disabled, nil
}

// openSharedMaps creates the maps the probes' programs share, or clones
// the accounting's own (owned) where the accounting folds the probes'
// counters in its walk.
func (p *Probes) openSharedMaps(spec *ebpf.CollectionSpec, owned map[string]*ebpf.Map) error {
	for _, name := range sharedMaps {
		var m *ebpf.Map
		var err error
		if am := owned[name]; am != nil {
			// The accounting's own map, through a descriptor of ours:
			// closing the probes leaves the accounting's open.
			m, err = am.Clone()
		} else {
			m, err = ebpf.NewMap(spec.Maps[name])
		}
		if err != nil {
			return explainLoadError(fmt.Errorf("create map %s: %w", name, err), p.log)
		}
		p.maps[name] = m
	}
	return nil
}

// attachProbe loads and attaches one probe in the variant the kernel
// supports; a probe that can't is logged and left off, the others run.
func (p *Probes) attachProbe(kspec *btf.Spec, spec *ebpf.CollectionSpec, cache *btf.Cache, def probeDef) {
	hooks, why := pickVariant(kspec, def)
	if hooks == nil {
		p.log.Warn("probe unavailable", zap.String("probe", def.name), zap.String("reason", why))
		return
	}
	if err := p.attach(spec, hooks, cache); err != nil {
		// A verifier rejection's log goes to debug; other errors (a
		// hook the kernel refuses) speak for themselves.
		err, _ = explainVerifierError(err, p.log)
		p.log.Warn("probe failed to load", zap.String("probe", def.name), zap.Error(err))
		return
	}
	p.active = append(p.active, def.name)
	p.log.Info("probe active", zap.String("probe", def.name))
}

// LoadProbes loads and attaches every probe the kernel offers. A probe
// whose hooks are missing from the kernel's BTF, or that fails to load or
// attach, is logged and left out; Active lists the ones that run. The error
// is for what no probe can do without: BTF, the shared maps.
func LoadProbes(o ProbeOptions) (*Probes, error) {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	kspec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("load kernel BTF: %w", err)
	}
	spec, err := loadProbes()
	if err != nil {
		return nil, fmt.Errorf("parse probes object: %w", err)
	}
	ncpu, err := ebpf.PossibleCPU()
	if err != nil {
		return nil, fmt.Errorf("count possible CPUs: %w", err)
	}
	hier, subsys, err := hierarchyConsts(o.Hierarchy.Kind)
	if err != nil {
		return nil, err
	}
	p := &Probes{log: log, maps: map[string]*ebpf.Map{}, progs: map[string]*ebpf.Program{}}
	disabled, err := disabledProbes(o.Disable)
	if err != nil {
		return nil, err
	}

	// Counters are opened first: how many opened is a constant of the
	// programs, and none means the context-switch program is not loaded.
	if !disabled[reading.ProbeCounters] {
		events := o.Counters
		if events == nil {
			events = DefaultCounters
		}
		p.counters, err = openCounters(events, ncpu, log)
		if err != nil {
			return nil, err
		}
	}
	nCounters := uint32(0)
	if p.counters != nil {
		nCounters = uint32(len(p.counters.names))
	}
	for name, v := range map[string]uint32{
		probesVarHierarchy: hier, probesVarV1Subsys: subsys,
		probesVarPageShift: pageShift(), probesVarNrCounters: nCounters,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			p.closeCounters()
			return nil, fmt.Errorf("set %s: %w", name, err)
		}
	}

	var owned map[string]*ebpf.Map
	if o.Accounting != nil {
		owned = o.Accounting.foldMaps()
		p.acc = o.Accounting
		// A walk before the probes were loaded folded nothing of theirs.
		p.accWalks = o.Accounting.walks.Load()
	}
	if err := p.openSharedMaps(spec, owned); err != nil {
		p.Close()
		return nil, err
	}
	if p.counters != nil {
		if err := p.counters.install(p.maps); err != nil {
			p.Close()
			return nil, err
		}
	}

	cache := btf.NewCache()
	if err := p.loadFold(spec, cache); err != nil {
		p.Close()
		err, _ = explainVerifierError(err, log)
		return nil, err
	}
	defs := probeDefs
	if o.defs != nil {
		defs = o.defs
	}
	for _, def := range defs {
		switch {
		case disabled[def.name]:
			log.Info("probe disabled", zap.String("probe", def.name))
		case def.name == reading.ProbeCounters && nCounters == 0:
			log.Info("probe off: no perf counter available, nothing runs at context switches",
				zap.String("probe", def.name))
		default:
			p.attachProbe(kspec, spec, cache, def)
		}
	}
	if p.counters != nil && !p.isActive(reading.ProbeCounters) {
		p.closeCounters()
	}
	return p, nil
}

// pickVariant returns the hooks of def's first variant whose tracepoints
// exist with the expected arguments, or nil and why none does.
func pickVariant(kspec *btf.Spec, def probeDef) ([]hook, string) {
	var reasons []string
variants:
	for _, hooks := range def.variants {
		for _, h := range hooks {
			if err := checkTracepoint(kspec, h.tracepoint, h.args); err != nil {
				reasons = append(reasons, err.Error())
				continue variants
			}
		}
		return hooks, ""
	}
	return nil, strings.Join(reasons, "; ")
}

// checkTracepoint checks that the kernel's BTF has tracepoint tp (a
// btf_trace_<tp> typedef, which is what tp_btf attaches to) and that its
// arguments, after the hidden first one, match args.
func checkTracepoint(kspec *btf.Spec, tp string, args []string) error {
	var td *btf.Typedef
	if err := kspec.TypeByName("btf_trace_"+tp, &td); err != nil {
		return fmt.Errorf("kernel BTF has no tracepoint %s", tp)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return fmt.Errorf("btf_trace_%s is not a function pointer", tp)
	}
	fp, ok := btf.UnderlyingType(ptr.Target).(*btf.FuncProto)
	if !ok || len(fp.Params) != len(args)+1 {
		return fmt.Errorf("tracepoint %s does not take the %d arguments the probe reads", tp, len(args))
	}
	for i, want := range args {
		if want == "" {
			continue
		}
		if got := argName(fp.Params[i+1].Type); got != want {
			return fmt.Errorf("tracepoint %s argument %d is %s, the probe reads %s", tp, i+1, got, want)
		}
	}
	return nil
}

func argName(t btf.Type) string {
	t = btf.UnderlyingType(btf.QualifiedType(t))
	if p, ok := t.(*btf.Pointer); ok {
		return "*" + argName(p.Target)
	}
	return t.TypeName()
}

// attach loads hooks' programs against the shared maps and attaches them,
// all or none.
func (p *Probes) attach(spec *ebpf.CollectionSpec, hooks []hook, cache *btf.Cache) error {
	s := spec.Copy()
	s.Programs = map[string]*ebpf.ProgramSpec{}
	for _, h := range hooks {
		s.Programs[h.prog] = spec.Programs[h.prog]
	}
	for name := range s.Maps {
		if strings.HasPrefix(name, "test_") {
			delete(s.Maps, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{MapReplacements: p.maps, Cache: cache})
	if err != nil {
		return fmt.Errorf("load %s: %w", hooks[0].prog, err)
	}
	var links []link.Link
	for _, h := range hooks {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[h.prog]})
		if err != nil {
			for _, l := range links {
				l.Close()
			}
			coll.Close()
			return fmt.Errorf("attach tp_btf/%s: %w", h.tracepoint, err)
		}
		links = append(links, l)
	}
	p.colls = append(p.colls, coll)
	p.links = append(p.links, links...)
	for _, h := range hooks {
		p.progs[h.prog] = coll.Programs[h.prog]
	}
	return nil
}

func pageShift() uint32 {
	s := uint32(0)
	for n := os.Getpagesize(); n > 1; n >>= 1 {
		s++
	}
	return s
}

// Active lists the probes that run, in a fixed order.
func (p *Probes) Active() []string { return append([]string(nil), p.active...) }

func (p *Probes) isActive(name string) bool {
	for _, a := range p.active {
		if a == name {
			return true
		}
	}
	return false
}

// Counters names the perf counters read at context switches, in the order
// of ProbeCounters.Counters; empty when the counters probe is off.
func (p *Probes) Counters() []string {
	if p.counters == nil {
		return nil
	}
	return append([]string(nil), p.counters.names...)
}

// ProgramStats returns the cost of each attached program, as the kernel
// counts it while statistics are enabled (EnableStats).
func (p *Probes) ProgramStats() ([]reading.ProgramStat, error) {
	return programStats(p.progs)
}

// Close detaches the programs and frees their maps and perf events.
func (p *Probes) Close() error {
	var errs []error
	for _, l := range p.links {
		errs = append(errs, l.Close())
	}
	for _, c := range p.colls {
		c.Close()
	}
	for _, m := range p.maps {
		errs = append(errs, m.Close())
	}
	p.links, p.colls, p.maps = nil, nil, nil
	p.closeCounters()
	return errors.Join(errs...)
}

func (p *Probes) closeCounters() {
	if p.counters != nil {
		p.counters.close()
		p.counters = nil
	}
}
