// Package stats runs the loop that reads the accounting source and the
// node's meter each interval, splits the node's energy among workloads
// through the ratio model, and publishes immutable snapshots.
package stats

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/usage"
	"github.com/wattrace/wattrace/pkg/workload"
)

// Config configures the loop.
type Config struct {
	Interval  time.Duration
	Retention time.Duration
	// IdlePolicy is "none", "even" or "cpu".
	IdlePolicy string
	// IdleWatts gives a zone's idle power by zone name; zones without an
	// entry learn it as the lowest power seen at low utilization.
	IdleWatts map[string]float64
	// Sockets maps each CPU to its socket; empty means one socket.
	Sockets map[int]int
	// CPUs is the number of online CPUs; 0 means runtime.NumCPU().
	CPUs int
	// Hierarchy names the key hierarchy, for the snapshot.
	Hierarchy string
	// UsageMetric names, per zone, what its dynamic energy is split by:
	// "cpu_time" (the default) or a perf counter the probes read; a zone
	// whose counter is not read falls back to CPU time.
	UsageMetric map[string]string
}

// Resolver names cgroups; *cgroup.Resolver implements it.
type Resolver interface {
	Path(id uint64) (string, bool)
}

// existence is implemented by resolvers that can tell whether a cgroup
// still exists (*cgroup.Resolver).
type existence interface {
	Exists(id uint64, path string) bool
}

// learnThreshold is the utilization below which an interval's power may
// teach the learned idle model: low enough that dynamic power is small.
const learnThreshold = 0.1

// Loop is the stats loop. Step and Run must be called from one goroutine;
// Snapshot may be called from any.
type Loop struct {
	cfg    Config
	policy model.IdlePolicy
	src    usage.Source
	meter  power.Meter
	res    Resolver
	log    *zap.Logger
	snap   atomic.Pointer[snapshot.Snapshot]

	started   bool
	last      time.Time
	intervals uint64
	zones     map[snapshot.ZoneID]*zoneState
	zoneOrder []snapshot.ZoneID
	cgIDs     map[uint64]*cgSeries // by the source's cgroup id
	byPath    map[string]*wstate   // cgroup workloads, by path
	procs     map[usage.ProcKey]*wstate
	nsockets  int

	ids       IdentityResolver
	levels    []workload.Kind
	resources ResourceReader
	probes    ProbeSource
	profiler  Profiler
	softirqs  []snapshot.SoftirqVector
	goneIDs   []uint64 // cgroup ids dropped since the last probe read
	units     map[string]*unitState
	health    *health

	// counterUse is each perf counter's events of this interval, per
	// cgroup (cg) and per process, by counter name.
	cgCounterUse, procCounterUse map[string]map[*wstate]float64
	fellBack                     map[string]bool // zones told they fall back to CPU time

	// Scratch maps reused every interval.
	cgUse, procUse     map[int]map[*wstate]float64 // socket → usage
	cgTotal, procTotal map[*wstate]float64
	dyn, idle          map[*wstate]float64
}

type zoneState struct {
	snapshot.Zone
	prevJ  float64
	seen   bool
	idleMd model.IdleModel
}

type wstate struct {
	w       snapshot.Consumer
	prevCPU uint64 // processes only: a cgroup's are per id, in cgSeries
	prevSw  uint64
	seen    bool     // present in the latest reading
	gone    bool     // merged away or dropped
	into    *wstate  // where a merged-away workload's ids now count
	rep     reported // cgroups: what rollUp has passed on to units
	// perfDone is a cgroup's perf counts of opted-in processes that ended.
	perfDone map[string]float64
	// probePrev is a process's last probe reading, kept only while a zone
	// is split by a perf counter (a cgroup's is per id, in cgSeries).
	probePrev *snapshot.ProbeStats
}

// cgSeries is one cgroup id's counters as the source reports them.
type cgSeries struct {
	prevCPU, prevSw uint64
	probePrev       snapshot.ProbeStats
	w               *wstate
}

// Option adds an optional part to the loop.
type Option func(*Loop)

// WithWorkloads rolls cgroups up into the workloads that own them at the
// given levels (containers, pods, VMs, jobs, units).
func WithWorkloads(ids IdentityResolver, levels []workload.Kind) Option {
	return func(l *Loop) { l.ids, l.levels = ids, levels }
}

// WithResources reads each workload's cgroup resource counters (memory,
// IO, pressure, tasks) every interval; it needs WithWorkloads.
func WithResources(r ResourceReader) Option {
	return func(l *Loop) { l.resources = r }
}

// New builds a loop. It fails on a configuration it can't honour, naming
// the key.
func New(cfg Config, src usage.Source, meter power.Meter, res Resolver, log *zap.Logger, opts ...Option) (*Loop, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("stats.interval must be positive, got %v", cfg.Interval)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("stats.retention must not be negative, got %v", cfg.Retention)
	}
	policy, err := model.ParseIdlePolicy(cfg.IdlePolicy)
	if err != nil {
		return nil, fmt.Errorf("power.idle-policy: %w", err)
	}
	for z, w := range cfg.IdleWatts {
		if _, err := model.NewConfiguredIdle(w); err != nil {
			return nil, fmt.Errorf("power.idle-watts %s: %w", z, err)
		}
	}
	if src == nil || meter == nil {
		return nil, errors.New("stats loop needs an accounting source and a meter")
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	sockets := map[int]bool{}
	for _, s := range cfg.Sockets {
		sockets[s] = true
	}
	l := &Loop{
		cfg: cfg, policy: policy, src: src, meter: meter, res: res, log: log,
		zones:    map[snapshot.ZoneID]*zoneState{},
		cgIDs:    map[uint64]*cgSeries{},
		byPath:   map[string]*wstate{},
		procs:    map[usage.ProcKey]*wstate{},
		nsockets: max(1, len(sockets)),
		cgUse:    map[int]map[*wstate]float64{},
		procUse:  map[int]map[*wstate]float64{},
		cgTotal:  map[*wstate]float64{},
		dyn:      map[*wstate]float64{},
		idle:     map[*wstate]float64{},
		units:    map[string]*unitState{},

		cgCounterUse:   map[string]map[*wstate]float64{},
		procCounterUse: map[string]map[*wstate]float64{},
		fellBack:       map[string]bool{},
	}
	for _, o := range opts {
		o(l)
	}
	l.health = newHealth(meter, log, src, l.probes)
	return l, nil
}

// Snapshot returns the latest snapshot, nil before the first interval.
func (l *Loop) Snapshot() *snapshot.Snapshot { return l.snap.Load() }

// Run steps the loop until ctx is done. The first step only takes a
// baseline; the first interval follows a second later so that a fresh
// exporter has figures quickly, then one each Interval.
func (l *Loop) Run(ctx context.Context) error {
	l.Step(time.Now())
	first := time.NewTimer(min(time.Second, l.cfg.Interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return nil
	case now := <-first.C:
		l.Step(now)
	}
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			l.Step(now)
		}
	}
}

// Step runs one interval ending at now. A failing source or meter is
// logged and never stops the other: the counters they keep are cumulative,
// so what a failed read missed is counted by the next good one.
func (l *Loop) Step(now time.Time) {
	reading, srcErr := l.src.Read()
	if srcErr != nil {
		l.log.Warn("read accounting source", zap.String("mode", l.src.Mode()), zap.Error(srcErr))
	}
	if !l.started {
		l.started, l.last = true, now
		if srcErr == nil {
			l.absorb(reading, now, true)
			l.absorbProbes(deadProcs(reading))
			l.absorbPerf(reading)
		}
		if a, ok := l.meter.(power.Advancer); ok {
			a.Advance(0, 0)
		}
		l.readMeter(0, 0)
		l.rollUp(now)
		l.publish(now)
		return
	}
	dt := now.Sub(l.last)
	l.last = now
	if dt <= 0 {
		return
	}
	l.intervals++
	var cpuSec float64
	if srcErr == nil {
		cpuSec = l.absorb(reading, now, false)
		l.absorbProbes(deadProcs(reading))
		l.absorbPerf(reading)
	} else {
		l.clearUsage()
	}
	util := cpuSec / (dt.Seconds() * float64(l.cfg.CPUs))
	if a, ok := l.meter.(power.Advancer); ok {
		a.Advance(util, dt)
	}
	l.readMeter(dt, util)
	l.rollUp(now)
	l.publish(now)
}

func (l *Loop) clearUsage() {
	for _, m := range l.cgCounterUse {
		clear(m)
	}
	for _, m := range l.procCounterUse {
		clear(m)
	}
	for _, m := range l.cgUse {
		clear(m)
	}
	for _, m := range l.procUse {
		clear(m)
	}
	clear(l.cgTotal)
}

// absorb folds a reading into the workloads and fills the usage maps with
// this interval's CPU seconds. It returns the node's CPU seconds. On the
// baseline read, what workloads had already used is their history, not
// usage of any interval; afterwards a new workload's counters are all new.
func (l *Loop) absorb(r usage.Reading, now time.Time, baseline bool) float64 {
	l.clearUsage()
	// Processes first: they say on which socket each cgroup ran.
	cgSocket := map[uint64]map[int]float64{}
	for _, w := range l.procs {
		w.seen = false
	}
	for i := range r.Processes {
		p := &r.Processes[i]
		w := l.procs[p.Key]
		if w == nil {
			w = &wstate{w: snapshot.Consumer{PID: p.Key.PID}}
			if baseline {
				w.w.CPUSeconds = float64(p.CPUNs) / 1e9
				w.w.ContextSwitches = p.Switches
				w.prevCPU, w.prevSw = p.CPUNs, p.Switches
			}
			l.procs[p.Key] = w
		}
		d, dsw := deltas(p.CPUNs, w.prevCPU, p.Switches, w.prevSw)
		w.prevCPU, w.prevSw = p.CPUNs, p.Switches
		w.w.CPUSeconds += float64(d) / 1e9
		w.w.ContextSwitches += dsw
		w.w.Comm, w.w.CgroupID, w.w.Alive, w.w.LastSeen = p.Comm, p.Cgroup, p.Alive, now
		w.seen = true
		w.w.Cgroup = l.cgroupPath(p.Cgroup)
		if d > 0 {
			s := l.socketOf(p.CPU)
			l.use(l.procUse, s)[w] += float64(d) / 1e9
			if l.nsockets > 1 {
				m := cgSocket[p.Cgroup]
				if m == nil {
					m = map[int]float64{}
					cgSocket[p.Cgroup] = m
				}
				m[s] += float64(d)
			}
		}
	}
	var total float64
	for _, w := range l.byPath {
		w.seen, w.w.Alive = false, false
	}
	for i := range r.Cgroups {
		c := &r.Cgroups[i]
		cs := l.cgIDs[c.ID]
		if cs == nil {
			cs = &cgSeries{}
			if baseline {
				cs.prevCPU, cs.prevSw = c.CPUNs, c.Switches
			}
			l.cgIDs[c.ID] = cs
		}
		d, dsw := deltas(c.CPUNs, cs.prevCPU, c.Switches, cs.prevSw)
		if baseline {
			d, dsw = c.CPUNs, c.Switches // history: counted, not usage
		}
		cs.prevCPU, cs.prevSw = c.CPUNs, c.Switches
		path, ok := l.resolve(c.ID)
		if ex, isEx := l.res.(existence); ok && isEx {
			// The resolver's cache outlives removed cgroups; a removed
			// one is no longer alive, whatever its source still reports.
			ok = ex.Exists(c.ID, path)
		}
		w := l.attach(cs, c.ID, path, ok, now)
		w.w.CPUSeconds += float64(d) / 1e9
		w.w.ContextSwitches += dsw
		w.seen = true
		// A removed cgroup's retention runs from when it was last seen
		// alive, even while the source still reports its final totals.
		if ok {
			w.w.Alive, w.w.LastSeen, w.w.CgroupID = true, now, c.ID
		}
		if d == 0 || baseline {
			continue
		}
		sec := float64(d) / 1e9
		total += sec
		l.cgTotal[w] += sec
		l.spread(w, sec, cgSocket[c.ID])
	}
	return total
}

// attach finds the workload a cgroup id's figures go to. Workloads are
// keyed by path, so a cgroup removed and created again under the same path
// (a restarted service) continues its series rather than restarting or
// duplicating it. An id not yet resolvable gets a placeholder named by id,
// merged into the path's workload once the id resolves.
func (l *Loop) attach(cs *cgSeries, id uint64, path string, ok bool, now time.Time) *wstate {
	if !ok {
		if cs.w == nil {
			key := fmt.Sprintf("id:%d", id)
			cs.w = l.byPath[key]
			if cs.w == nil {
				// Retention of a cgroup never resolved (removed before
				// we could name it) runs from its first sighting.
				cs.w = &wstate{w: snapshot.Consumer{Cgroup: key, CgroupID: id, LastSeen: now}}
				l.byPath[key] = cs.w
			}
		}
		return cs.w
	}
	if cs.w != nil && cs.w.w.Cgroup == path {
		return cs.w
	}
	target := l.byPath[path]
	if target == nil {
		target = &wstate{w: snapshot.Consumer{Cgroup: path, CgroupID: id, LastSeen: now}}
		l.byPath[path] = target
	}
	if old := cs.w; old != nil && old != target {
		target.w.CPUSeconds += old.w.CPUSeconds
		target.w.ContextSwitches += old.w.ContextSwitches
		for _, e := range old.w.Energy {
			target.w.Energy = target.w.Energy.Add(e.Zone, e.DynamicJ, e.IdleJ)
		}
		// What old already passed on to its units moves along, so
		// rollUp doesn't pass it on twice. A placeholder (an id not yet
		// resolved) belonged to no unit: what it "passed on" went
		// nowhere, so the units get it now, through target's growth.
		if !strings.HasPrefix(old.w.Cgroup, "id:") {
			target.rep.cpu += old.rep.cpu
			target.rep.switches += old.rep.switches
			for _, e := range old.rep.energy {
				target.rep.energy = target.rep.energy.Add(e.Zone, e.DynamicJ, e.IdleJ)
			}
		}
		delete(l.byPath, old.w.Cgroup)
		old.gone, old.into = true, target
	}
	cs.w = target
	return target
}

// spread places a cgroup's usage on sockets in proportion to where its
// processes ran; with one socket, or nothing to go by, evenly.
func (l *Loop) spread(w *wstate, sec float64, bySocket map[int]float64) {
	if l.nsockets == 1 {
		l.use(l.cgUse, 0)[w] += sec
		return
	}
	var sum float64
	for _, v := range bySocket {
		sum += v
	}
	if sum == 0 {
		for s := 0; s < l.nsockets; s++ {
			l.use(l.cgUse, s)[w] += sec / float64(l.nsockets)
		}
		return
	}
	for s, v := range bySocket {
		l.use(l.cgUse, s)[w] += sec * v / sum
	}
}

func (l *Loop) use(m map[int]map[*wstate]float64, socket int) map[*wstate]float64 {
	u := m[socket]
	if u == nil {
		u = map[*wstate]float64{}
		m[socket] = u
	}
	return u
}

func (l *Loop) socketOf(cpu int) int {
	if l.nsockets == 1 || cpu < 0 {
		return 0
	}
	return l.cfg.Sockets[cpu]
}

func (l *Loop) resolve(id uint64) (string, bool) {
	if l.res == nil {
		return fmt.Sprintf("id:%d", id), true
	}
	return l.res.Path(id)
}

func (l *Loop) cgroupPath(id uint64) string {
	if cs := l.cgIDs[id]; cs != nil && cs.w != nil {
		return cs.w.w.Cgroup
	}
	if p, ok := l.resolve(id); ok {
		return p
	}
	return fmt.Sprintf("id:%d", id)
}

// deadProcs lists the processes a reading reports for the last time.
func deadProcs(r usage.Reading) []usage.ProcKey {
	var out []usage.ProcKey
	for i := range r.Processes {
		if !r.Processes[i].Alive {
			out = append(out, r.Processes[i].Key)
		}
	}
	return out
}

// deltas returns cur−prev per counter; a counter that went backwards was
// reset by its source (a workload forgotten and seen again), and its new
// value is all new usage.
func deltas(cur, prev, curSw, prevSw uint64) (uint64, uint64) {
	d, dsw := cur-prev, curSw-prevSw
	if cur < prev {
		d = cur
	}
	if curSw < prevSw {
		dsw = curSw
	}
	return d, dsw
}

func (l *Loop) readMeter(dt time.Duration, util float64) {
	samples, err := l.meter.Read()
	if err != nil {
		l.log.Warn("read power meter", zap.String("source", l.meter.Name()), zap.Error(err))
		return
	}
	var platform, components float64
	havePlatform := false
	for _, s := range samples {
		id := snapshot.ZoneID{Name: s.Zone, Socket: s.Socket}
		z := l.zone(id, s.Source)
		if !z.seen || dt <= 0 {
			z.prevJ, z.seen = s.Joules, true
			continue
		}
		dE := s.Joules - z.prevJ
		z.prevJ = s.Joules
		if dE < 0 {
			dE = 0
		}
		switch s.Zone {
		case power.ZonePlatform:
			platform, havePlatform = platform+dE, true
		case power.ZonePackage, power.ZoneDRAM, power.ZoneGPU:
			components += dE
		}
		l.splitZone(z, dE, dt, util)
	}
	if havePlatform && components > 0 {
		l.other(platform, components, dt)
	}
}

// zone returns the state of a zone, creating it on first sight.
func (l *Loop) zone(id snapshot.ZoneID, source string) *zoneState {
	z := l.zones[id]
	if z != nil {
		return z
	}
	if source == "" {
		source = l.meter.Name()
	}
	z = &zoneState{Zone: snapshot.Zone{ZoneID: id, Source: source, Estimated: l.estimated(source)}}
	z.idleMd = l.idleModel(id.Name)
	l.zones[id] = z
	l.zoneOrder = append(l.zoneOrder, id)
	return z
}

// estimated tells whether a zone's source is a model: a combined meter
// answers per member, so measured RAPL zones next to an estimated platform
// are labelled as what they are.
func (l *Loop) estimated(source string) bool {
	if c, ok := l.meter.(interface{ Meters() []power.Meter }); ok {
		for _, m := range c.Meters() {
			if m.Name() == source {
				return m.Estimated()
			}
		}
	}
	return l.meter.Estimated()
}

// other books what the platform meter saw beyond the CPU packages, DRAM and
// GPUs (fans, disks, NICs, PSU loss) as the node-level zone "other". It is
// part of the platform zone, which the model already splits among
// workloads, so here it stays unattributed: reporting it again per workload
// would count it twice. A platform reading below its components (the BMC
// and RAPL sample at different moments) books zero rather than negative.
func (l *Loop) other(platform, components float64, dt time.Duration) {
	z := l.zones[snapshot.ZoneID{Name: snapshot.ZoneOther, Socket: -1}]
	if z == nil {
		z = &zoneState{Zone: snapshot.Zone{ZoneID: snapshot.ZoneID{Name: snapshot.ZoneOther, Socket: -1}, Source: snapshot.SourceDerived,
			Estimated: l.zones[snapshot.ZoneID{Name: power.ZonePlatform, Socket: -1}].Estimated}}
		l.zones[z.ZoneID] = z
		l.zoneOrder = append(l.zoneOrder, z.ZoneID)
	}
	dE := max(platform-components, 0)
	z.EnergyJ += dE
	z.DynamicJ += dE
	z.UnattributedJ += dE
	z.PowerW = dE / dt.Seconds()
}

func (l *Loop) idleModel(zone string) model.IdleModel {
	if w, ok := l.cfg.IdleWatts[zone]; ok {
		if m, err := model.NewConfiguredIdle(w); err == nil { // validated in New
			return m
		}
	}
	if i, ok := l.meter.(power.IdleModeler); ok {
		if w, ok := i.IdleWatts(zone); ok {
			if m, err := model.NewConfiguredIdle(w); err == nil {
				return m
			}
		}
	}
	return model.NewLearnedIdle(learnThreshold)
}

func (l *Loop) splitZone(z *zoneState, dE float64, dt time.Duration, util float64) {
	idleJ := z.idleMd.IdleJ(dt, dE, util)
	res := l.split(z, dE, idleJ, l.cgUse, true)
	l.split(z, dE, idleJ, l.procUse, false)
	z.EnergyJ += dE
	z.IdleJ += res.IdleJ
	z.DynamicJ += res.DynamicJ
	z.UnattributedJ += res.UnattributedJ
	z.PowerW = dE / dt.Seconds()
	if res.Clamped {
		z.IdleClamps++
	}
}

// split runs the model for one zone over one hierarchy (cgroups or
// processes; each sums to the node on its own) and adds the result to the
// workloads' cumulative energy.
func (l *Loop) split(z *zoneState, dE, idleJ float64, use map[int]map[*wstate]float64, cg bool) model.Result {
	clear(l.dyn)
	clear(l.idle)
	var usageMap map[*wstate]float64
	if m := l.counterUsage(z, cg); m != nil {
		usageMap = m
	} else if z.Socket >= 0 && l.nsockets > 1 {
		usageMap = l.use(use, z.Socket)
	} else if l.nsockets == 1 {
		usageMap = l.use(use, 0)
	} else {
		usageMap = l.merged(use, cg)
	}
	res := model.Split(model.Interval[*wstate]{EnergyJ: dE, IdleJ: idleJ, Usage: usageMap, Policy: l.policy}, l.dyn, l.idle)
	for w, j := range l.dyn {
		w.w.Energy = w.w.Energy.Add(z.Name, j, 0)
	}
	for w, j := range l.idle {
		w.w.Energy = w.w.Energy.Add(z.Name, 0, j)
	}
	return res
}

// counterUsage is the usage map of a zone split by a perf counter, nil for
// CPU time. Counters are credited per task, not per socket, so a counter
// splits each socket's zone by the node-wide counts.
func (l *Loop) counterUsage(z *zoneState, cg bool) map[*wstate]float64 {
	metric := l.cfg.UsageMetric[z.Name]
	if metric == "" || metric == "cpu_time" {
		return nil
	}
	read := false
	if l.probes != nil {
		for _, c := range l.probes.Counters() {
			read = read || c == metric
		}
	}
	if !read {
		if !l.fellBack[z.Name] {
			l.fellBack[z.Name] = true
			l.log.Warn("usage metric not available; splitting by CPU time", zap.String("zone", z.Name), zap.String("metric", metric))
		}
		return nil
	}
	m := l.procCounterUse[metric]
	if cg {
		m = l.cgCounterUse[metric]
	}
	if m == nil {
		m = map[*wstate]float64{} // counted, but nothing this interval
	}
	return m
}

// merged sums usage over sockets for node-wide zones on multi-socket nodes.
func (l *Loop) merged(use map[int]map[*wstate]float64, cg bool) map[*wstate]float64 {
	if cg {
		return l.cgTotal
	}
	if l.procTotal == nil {
		l.procTotal = map[*wstate]float64{}
	}
	clear(l.procTotal)
	for _, m := range use {
		for w, v := range m {
			l.procTotal[w] += v
		}
	}
	return l.procTotal
}

// publish builds an immutable snapshot and drops workloads past retention.
func (l *Loop) publish(now time.Time) {
	s := &snapshot.Snapshot{
		Time:      now,
		Interval:  l.cfg.Interval,
		Mode:      l.src.Mode(),
		Hierarchy: l.cfg.Hierarchy,
		Intervals: l.intervals,
		Zones:     make([]snapshot.Zone, 0, len(l.zoneOrder)),
		Cgroups:   make([]snapshot.Consumer, 0, len(l.byPath)),
		Processes: make([]snapshot.Consumer, 0, len(l.procs)),
	}
	for _, id := range l.zoneOrder {
		s.Zones = append(s.Zones, l.zones[id].Zone)
	}
	s.Cgroups = l.export(s.Cgroups, l.byPath, now)
	for id, cs := range l.cgIDs {
		for cs.w != nil && cs.w.gone && cs.w.into != nil {
			cs.w = cs.w.into
		}
		if cs.w != nil && cs.w.gone {
			delete(l.cgIDs, id)
			if l.probes != nil {
				l.goneIDs = append(l.goneIDs, id)
			}
		}
	}
	s.Processes = l.export(s.Processes, l.procs, now)
	s.Workloads = l.exportUnits(now)
	if l.probes != nil {
		s.Probes = l.probes.Active()
		s.Counters = l.probes.Counters()
		s.Softirqs = append([]snapshot.SoftirqVector(nil), l.softirqs...)
	}
	if l.profiler != nil {
		s.PerfEvents = l.profiler.Events()
	}
	l.health.publish(s)
	l.snap.Store(s)
}

func (l *Loop) export(out []snapshot.Consumer, ws any, now time.Time) []snapshot.Consumer {
	// keep reports whether the state is kept; a workload past retention
	// that its source still reports keeps its state (so its counters
	// can't restart) but leaves the snapshot.
	add := func(w *wstate) (keep bool) {
		if !w.w.Alive && now.Sub(w.w.LastSeen) > l.cfg.Retention {
			return w.seen
		}
		c := w.w
		c.Energy = append(snapshot.Energy(nil), w.w.Energy...)
		if w.w.Probes != nil {
			p := *w.w.Probes
			c.Probes = &p
		}
		if w.w.Perf != nil {
			c.Perf = make(map[string]float64, len(w.w.Perf))
			for k, v := range w.w.Perf {
				c.Perf[k] = v
			}
		}
		out = append(out, c)
		return true
	}
	switch m := ws.(type) {
	case map[string]*wstate:
		for k, w := range m {
			if !add(w) {
				w.gone = true
				delete(m, k)
			}
		}
	case map[usage.ProcKey]*wstate:
		for k, w := range m {
			if !add(w) {
				delete(m, k)
			}
		}
	}
	return out
}
