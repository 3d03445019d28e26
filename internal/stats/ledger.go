package stats

import (
	"fmt"
	"iter"
	"sort"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// CgroupPaths names cgroups by id; *cgroup.Resolver implements it.
type CgroupPaths interface {
	Path(id uint64) (string, bool)
}

// existence is implemented by resolvers that can tell whether a cgroup
// still exists (*cgroup.Resolver).
type existence interface {
	Exists(id uint64, path string) bool
}

// goneReporter is a resolver that tells an id its walk did not find, and
// so will never name, from one it has not looked for yet
// (*cgroup.Resolver).
type goneReporter interface {
	Gone(id uint64) bool
}

// pathChecker is a resolver that answers from its cache without walking
// (Known) and checks one path's id, remembering it (ID); *cgroup.Resolver.
type pathChecker interface {
	Known(id uint64) (string, bool)
	ID(rel string) (uint64, error)
}

// consumer is the ledger's state of one consumer (a cgroup or a process):
// who it is (w; its additive fields are published from f) and its
// cumulative figures. What other stages keep about a consumer they keep
// themselves, keyed by it.
type consumer struct {
	w       snapshot.Consumer
	f       figures
	prevCPU uint64           // processes only: a cgroup's are per id, in cgSeries
	cpu     *reading.Counter // processes, when the ledger validates CPU
	prevSw  uint64
	seen    bool      // present in the latest reading
	gone    bool      // merged away or dropped
	into    *consumer // where a merged-away consumer's ids now count
	// pub is the record last published (retention.go), published again
	// while nothing of it changes.
	pub *snapshot.Consumer
}

// cgSeries is one cgroup id's counters as the source reports them.
type cgSeries struct {
	prevCPU, prevSw uint64
	cpu             *reading.Counter // when the ledger validates CPU
	w               *consumer
	// liveIn is the last read (ledger.reads) that reported a live process
	// in the cgroup: then it existed at that read, a cgroup with a task
	// in it can't be removed.
	liveIn uint64
	// ended: the id's cgroup was removed. The kernel never gives its id
	// to another cgroup, so the id is neither resolved nor checked again,
	// however long the source keeps reporting its final counters (its
	// exit-map entry, for many reads): each resolution of an id cgroupfs
	// no longer has could walk the whole hierarchy.
	ended bool
}

// consumers is the ledger's view for the stages after it.
type consumers interface {
	// cgroup is the consumer a cgroup id's figures go to, nil when the
	// accounting has not reported the id yet.
	cgroup(id uint64) *consumer
	// process is a process's consumer, nil when unknown.
	process(k reading.ProcKey) *consumer
	// cgroups are the cgroups' consumers, processes the processes'.
	cgroups() iter.Seq[*consumer]
	processes() iter.Seq2[reading.ProcKey, *consumer]
	// droppedCgroups are the cgroup ids the ledger forgot when it last
	// published (valid until it publishes again: a stage after it in the
	// list sees each once in its own publish).
	droppedCgroups() []uint64
	// merges are the consumers merged away in this step's absorb, in the
	// order they merged (valid until the ledger's next begin).
	merges() []merge
}

// merge is one consumer merged into another: a cgroup id's placeholder (or
// a path's former consumer) whose figures now count in into's.
type merge struct{ old, into *consumer }

// ledger is the stage that holds the consumers: it turns the accounting
// source's cumulative counters into per-interval deltas, merges cgroup ids
// into paths, and drops consumers past retention. The other stages find
// consumers here.
type ledger struct {
	phases
	use *shares
	res CgroupPaths
	// names, when set, names the ids res can no longer find: cgroups
	// created and removed between two reads (bpfloader.CgroupNames).
	names     CgroupPaths
	retention time.Duration
	cgIDs     map[uint64]*cgSeries // by the source's cgroup id
	byPath    map[string]*consumer // cgroups, by path
	procs     map[reading.ProcKey]*consumer
	// dropped are the cgroup ids forgotten at the last publish (the probes
	// forget their entries), merged the merges of this step (the roll-up
	// moves what was passed on).
	dropped []uint64
	merged  []merge
	// check, when set, validates the CPU counters (sources that don't).
	check *cpuCheck
	// endedKept is how many ended processes stay published (the most
	// energy first); < 0 keeps every one for the retention.
	endedKept int
	// reads counts the readings absorbed.
	reads uint64
	// forgetEnded's scratch, kept between steps: the ended processes, and
	// those it would drop by PID (indices into ended).
	ended    []endedProc
	dropPIDs map[uint32][]int
}

func makeLedger(d *deps) (stage, error) {
	l := newLedger(d.res, d.cfg.Retention, d.use)
	l.names = d.opts.names
	switch {
	case d.cfg.EndedProcesses > 0:
		l.endedKept = d.cfg.EndedProcesses
	case d.cfg.EndedProcesses < 0:
		l.endedKept = 0
	}
	if _, ok := d.src.(HealthReporter); !ok {
		// A source that validates its counters reports its own health
		// (procfs); the BPF maps' counters are validated here.
		l.check = newCPUCheck(d.src.Mode(), d.cfg.CPUs, d.log)
	}
	return l, nil
}

func newLedger(res CgroupPaths, retention time.Duration, use *shares) *ledger {
	return &ledger{res: res, retention: retention, endedKept: -1, use: use,
		cgIDs:  map[uint64]*cgSeries{},
		byPath: map[string]*consumer{},
		procs:  map[reading.ProcKey]*consumer{},
	}
}

// healthSources is the CPU check, when the ledger validates the counters.
func (l *ledger) healthSources() []any {
	if l.check == nil {
		return nil
	}
	return []any{l.check}
}

// begin counts the read and forgets the previous interval's usage (all of
// it stays forgotten when the read failed).
func (l *ledger) begin(iv *interval) {
	if l.check != nil {
		l.check.read(iv.readErr)
	}
	l.use.clear()
	l.merged = l.merged[:0]
}

func (l *ledger) absorb(iv *interval) {
	if l.check != nil {
		l.check.advance(iv.now, iv.readAt, iv.baseline)
	}
	iv.cpuSeconds = l.absorbReading(iv.reading, iv.now, iv.baseline)
}

// absorbReading folds a reading into the consumers and hands each one's
// CPU seconds of this interval to the shares. It returns the node's CPU
// seconds. On the baseline read, what consumers had already used is their
// history, not usage of any interval; afterwards a new consumer's counters
// are all new.
func (l *ledger) absorbReading(r reading.Usage, now time.Time, baseline bool) float64 {
	use := l.use
	use.clear()
	l.reads++
	// Processes first: they say on which socket each cgroup ran, and
	// which cgroups held a live process.
	cgSocket := map[uint64]map[int]float64{}
	for _, w := range l.procs {
		w.seen = false
	}
	for i := range r.Processes {
		p := &r.Processes[i]
		w := l.procs[p.Key]
		if w == nil {
			w = &consumer{w: snapshot.Consumer{PID: p.Key.PID}}
			if baseline {
				w.f.CPUSeconds = float64(l.history(p.CPUNs, "process", uint64(p.Key.PID))) / 1e9
				w.f.ContextSwitches = p.Switches
				w.prevCPU, w.prevSw = p.CPUNs, p.Switches
			}
			l.procs[p.Key] = w
		}
		d, dsw := deltas(p.CPUNs, w.prevCPU, p.Switches, w.prevSw)
		if l.check != nil {
			if w.cpu == nil {
				w.cpu = l.check.counter(baseline)
			}
			d = l.check.delta(w.cpu, p.CPUNs, func() string { return fmt.Sprintf("process %d CPU ns", p.Key.PID) })
		}
		w.prevCPU, w.prevSw = p.CPUNs, p.Switches
		w.f.CPUSeconds += float64(d) / 1e9
		w.f.ContextSwitches += dsw
		w.w.Comm, w.w.CgroupID, w.w.Alive, w.w.LastSeen = p.Comm, p.Cgroup, p.Alive, now
		w.seen = true
		w.w.Cgroup = l.cgroupPath(p.Cgroup, p.Alive)
		if d > 0 {
			s := use.socketOf(p.CPU)
			use.at(use.proc, s)[w] += float64(d) / 1e9
			if use.nsockets > 1 {
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
		if l.check != nil {
			if cs.cpu == nil {
				cs.cpu = l.check.counter(baseline)
			}
			d = l.check.delta(cs.cpu, c.CPUNs, func() string { return fmt.Sprintf("cgroup %d CPU ns", c.ID) })
		}
		if baseline {
			// History: counted, not usage.
			d, dsw = l.history(c.CPUNs, "cgroup", c.ID), c.Switches
		}
		cs.prevCPU, cs.prevSw = c.CPUNs, c.Switches
		w, alive := cs.w, false
		if !cs.ended || w == nil {
			w, alive = l.place(cs, c.ID, cs.liveIn == l.reads, now)
		}
		w.f.CPUSeconds += float64(d) / 1e9
		w.f.ContextSwitches += dsw
		w.seen = true
		// A removed cgroup's retention runs from when it was last seen
		// alive, even while the source still reports its final totals.
		if alive {
			w.w.Alive, w.w.LastSeen, w.w.CgroupID = true, now, c.ID
		}
		if d == 0 || baseline {
			continue
		}
		sec := float64(d) / 1e9
		total += sec
		use.cgTotal[w] += sec
		use.spread(w, sec, cgSocket[c.ID])
	}
	return total
}

// place finds the consumer of a cgroup id the source reports, and whether
// the cgroup is alive; it marks the series ended once the cgroup is known
// to be gone. held says a live process of this reading is in it.
func (l *ledger) place(cs *cgSeries, id uint64, held bool, now time.Time) (*consumer, bool) {
	path, named, gone := l.resolve(id)
	alive := named
	if ex, isEx := l.res.(existence); named && isEx && !held {
		// The resolver's cache outlives removed cgroups; a removed
		// one is no longer alive, whatever its source still reports.
		// A cgroup that holds a live process can't have been removed:
		// only the others are looked up (a stat per cgroup per step
		// was 1,000 syscalls a step at 1,000 cgroups).
		alive = ex.Exists(id, path)
		gone = !alive
	}
	if !named {
		// Removed before cgroupfs could name it: its path from when
		// it was created, if known; it is not alive either way.
		path, named = l.remembered(id)
	}
	cs.ended = gone
	return l.attach(cs, id, path, named, now), alive
}

// history is a counter's value at the baseline read, what the consumer
// used before the exporter started: credited as history only if it is
// plausible (no more than every CPU busy for maxHistory).
func (l *ledger) history(v uint64, kind string, id uint64) uint64 {
	if l.check == nil {
		return v
	}
	if err := reading.CheckGauge(float64(v), l.check.MaxRate*maxHistory.Seconds()); err != nil {
		l.check.Rejects.Add(err, fmt.Sprintf("%s %d CPU ns", kind, id))
		return 0
	}
	return v
}

// attach finds the consumer a cgroup id's figures go to. Cgroups are keyed
// by path, so a cgroup removed and created again under the same path (a
// restarted service) continues its series rather than restarting or
// duplicating it. An id not yet resolvable gets a placeholder named by id,
// merged into the path's consumer once the id resolves.
func (l *ledger) attach(cs *cgSeries, id uint64, path string, ok bool, now time.Time) *consumer {
	if !ok {
		if cs.w == nil {
			key := fmt.Sprintf("id:%d", id)
			cs.w = l.byPath[key]
			if cs.w == nil {
				// Retention of a cgroup never resolved (removed before
				// we could name it) runs from its first sighting.
				cs.w = &consumer{w: snapshot.Consumer{Cgroup: key, CgroupID: id, LastSeen: now}}
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
		target = &consumer{w: snapshot.Consumer{Cgroup: path, CgroupID: id, LastSeen: now}}
		l.byPath[path] = target
	}
	if old := cs.w; old != nil && old != target {
		target.f.add(&old.f)
		l.merged = append(l.merged, merge{old: old, into: target})
		delete(l.byPath, old.w.Cgroup)
		old.gone, old.into = true, target
	}
	cs.w = target
	return target
}

// resolve names a cgroup id: its path, whether it has one, and whether
// the id is known to belong to a removed cgroup, which no later call can
// name (ids are not reused).
func (l *ledger) resolve(id uint64) (path string, named, gone bool) {
	if l.res == nil {
		return fmt.Sprintf("id:%d", id), true, false
	}
	if c, ok := l.res.(pathChecker); ok && l.names != nil {
		// A new cgroup: its name from cgroup_mkdir, confirmed by one
		// stat, instead of a walk of the whole hierarchy (on a node
		// whose jobs or tests make cgroups all the time, a walk every
		// step was the largest part of the step).
		if p, ok := c.Known(id); ok {
			return p, true, false
		}
		if p, ok := l.names.Path(id); ok {
			if got, err := c.ID(p); err == nil && got == id {
				return p, true, false
			}
			// Created while we ran, and no longer at the path it was
			// created at: removed (short-lived cgroups, between two
			// steps). A walk can't find it either; it is named from
			// cgroup_mkdir as a gone cgroup. (A cgroup renamed in
			// place would be taken for gone: no manager does that.)
			return "", false, true
		}
	}
	if p, ok := l.res.Path(id); ok {
		return p, true, false
	}
	g, ok := l.res.(goneReporter)
	return "", false, ok && g.Gone(id)
}

// remembered is the path names remembers for an id cgroupfs no longer has.
func (l *ledger) remembered(id uint64) (string, bool) {
	if l.names == nil {
		return "", false
	}
	return l.names.Path(id)
}

// cgroupPath is the path of a process's cgroup; live says the process is,
// so the cgroup existed at this read.
func (l *ledger) cgroupPath(id uint64, live bool) string {
	if cs := l.cgIDs[id]; cs != nil && cs.w != nil {
		if live {
			cs.liveIn = l.reads
		}
		return cs.w.w.Cgroup
	}
	if p, ok, _ := l.resolve(id); ok {
		return p
	}
	if p, ok := l.remembered(id); ok {
		return p
	}
	return fmt.Sprintf("id:%d", id)
}

func (l *ledger) cgroup(id uint64) *consumer {
	if cs := l.cgIDs[id]; cs != nil {
		return cs.w
	}
	return nil
}

func (l *ledger) process(k reading.ProcKey) *consumer { return l.procs[k] }

func (l *ledger) cgroups() iter.Seq[*consumer] {
	return func(yield func(*consumer) bool) {
		for _, w := range l.byPath {
			if !yield(w) {
				return
			}
		}
	}
}

func (l *ledger) processes() iter.Seq2[reading.ProcKey, *consumer] {
	return func(yield func(reading.ProcKey, *consumer) bool) {
		for k, w := range l.procs {
			if !yield(k, w) {
				return
			}
		}
	}
}

func (l *ledger) droppedCgroups() []uint64 { return l.dropped }

func (l *ledger) merges() []merge { return l.merged }

// publish puts the consumers' records into the snapshot (shared with the
// last snapshot where unchanged) and forgets those past retention.
func (l *ledger) publish(iv *interval, s *snapshot.Snapshot) {
	now := iv.now
	l.dropped = l.dropped[:0]
	s.Cgroups = retain(l.byPath, now, l.retention, iv.gone, s.Cgroups, func(w *consumer) { w.gone = true })
	for id, cs := range l.cgIDs {
		for cs.w != nil && cs.w.gone && cs.w.into != nil {
			cs.w = cs.w.into
		}
		if cs.w != nil && cs.w.gone {
			delete(l.cgIDs, id)
			l.dropped = append(l.dropped, id)
		}
	}
	l.forgetEnded()
	s.Processes = retain(l.procs, now, l.retention, iv.gone, s.Processes, nil)
}

// forgetEnded drops the ended processes that no consumer of the snapshot
// could show: the process families export the top N processes by energy,
// so an ended process outside the N with the most energy among the ended
// can never be among them (nor can an ended process that nobody exports
// at all). On a node that forks a hundred times a second the retention
// otherwise holds tens of thousands of them, each copied into every
// snapshot (most of the exporter's memory and of a step's work there).
// Only processes the source no longer reports are dropped, so none can
// come back with a restarted counter; one whose label set (PID, comm,
// cgroup) a live process shares is kept, so that series never shrinks.
func (l *ledger) forgetEnded() {
	if l.endedKept < 0 {
		return
	}
	ended := l.ended[:0]
	for k, w := range l.procs {
		if !w.w.Alive && !w.seen {
			ended = append(ended, endedProc{key: k, w: w, total: energyTotal(w.f.Energy)})
		}
	}
	l.ended = ended
	defer clear(l.ended) // the scratch keeps no consumer alive
	if len(ended) <= l.endedKept {
		return
	}
	sort.Slice(ended, func(i, j int) bool { return ended[i].total > ended[j].total })
	// Those past the kept go, unless a live process has their labels.
	// The live processes are checked against their PIDs first, a lookup
	// of a number each (hashing every live process's comm and cgroup was
	// most of this at 10,000 processes); one with the PID of a process
	// to drop (a reused PID) is then compared in full. On a forking node
	// the ended beyond the kept are about a step's exits.
	if l.dropPIDs == nil {
		l.dropPIDs = map[uint32][]int{}
	}
	drop := l.dropPIDs
	defer clear(drop)
	for i := l.endedKept; i < len(ended); i++ {
		pid := ended[i].w.w.PID
		drop[pid] = append(drop[pid], i)
	}
	for _, w := range l.procs {
		if !w.w.Alive && !w.seen {
			continue
		}
		for _, i := range drop[w.w.PID] {
			if e := &ended[i]; e.w.w.Comm == w.w.Comm && e.w.w.Cgroup == w.w.Cgroup {
				e.keep = true
			}
		}
	}
	for i := l.endedKept; i < len(ended); i++ {
		if !ended[i].keep {
			delete(l.procs, ended[i].key)
		}
	}
}

// energyTotal is e summed over zones and modes.
func energyTotal(e snapshot.Energy) float64 {
	var t float64
	for _, z := range e {
		t += z.DynamicJ + z.IdleJ
	}
	return t
}

// endedProc is an ended process forgetEnded considers.
type endedProc struct {
	key   reading.ProcKey
	w     *consumer
	total float64 // its energy, every zone and mode
	keep  bool    // a live process has its labels
}

// deadProcs lists the processes a reading reports for the last time.
func deadProcs(r reading.Usage) []reading.ProcKey {
	var out []reading.ProcKey
	for i := range r.Processes {
		if !r.Processes[i].Alive {
			out = append(out, r.Processes[i].Key)
		}
	}
	return out
}

// deltas returns cur−prev per counter; a counter that went backwards was
// reset by its source (a consumer forgotten and seen again), and its new
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
