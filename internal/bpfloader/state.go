package bpfloader

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// The bookkeeping that turns the runtime the iterator claimed per task and
// the cumulative claims of the exit maps into monotonic per-process and
// per-cgroup counters. It is kept apart from the kernel objects so that it
// can be tested with synthetic reads.

type counters struct {
	runtime  uint64
	switches uint64
}

// sub returns c − prev, or zero for a field that went backwards (which the
// kernel's runtime never does; a zero keeps our counters monotonic anyway).
func (c counters) sub(prev counters) counters {
	var d counters
	if c.runtime > prev.runtime {
		d.runtime = c.runtime - prev.runtime
	}
	if c.switches > prev.switches {
		d.switches = c.switches - prev.switches
	}
	return d
}

type taskRec struct {
	tid, tgid          uint32
	start, leaderStart uint64
	cgroup             uint64
	c                  counters // claimed since the task was last reported
	cpu                int32
	comm               [16]byte // raw: turned into a string only when it changes
}

type procExitRec struct {
	key    reading.ProcKey
	c      counters
	cgroup uint64
	comm   string
}

type cgExitRec struct {
	id uint64
	c  counters
}

type procState struct {
	p        reading.ProcessUsage
	comm     [16]byte
	livePass uint64
	// grace is set on the first pass without live threads: a released
	// thread's free hook runs an RCU grace period later, so the process's
	// last remainder can arrive one read after its threads vanished.
	grace bool
}

type cgState struct {
	c        reading.CgroupUsage
	livePass uint64
	exitLast counters
	hasExit  bool
	idle     int // passes with neither live tasks nor new exits
}

// cgIdlePasses is how many reads a cgroup with no tasks and no exits is
// kept before its exit-map entry is deleted and its state dropped, so a
// churn of short-lived cgroups (pods, jobs) can't fill the map.
const cgIdlePasses = 120

type state struct {
	pass         uint64
	procs        map[reading.ProcKey]*procState
	procExitLast map[reading.ProcKey]counters
	cgroups      map[uint64]*cgState
	// The process and cgroup of the last record folded: the walk returns
	// a process's threads one after another, mostly in the same cgroup,
	// so at 100,000 threads in 2,000 processes most records need no map
	// lookup. Valid within one read (begin clears them).
	lastKey reading.ProcKey
	lastPS  *procState
	lastCG  *cgState
}

func newState() *state {
	return &state{
		procs:        map[reading.ProcKey]*procState{},
		procExitLast: map[reading.ProcKey]counters{},
		cgroups:      map[uint64]*cgState{},
	}
}

func (s *state) cgroup(id uint64) *cgState {
	cg := s.cgroups[id]
	if cg == nil {
		cg = &cgState{c: reading.CgroupUsage{ID: id}}
		s.cgroups[id] = cg
	}
	return cg
}

// update folds one read into the state. It returns the reading and the
// exit-map keys that have had their final read and must now be deleted.
func (s *state) update(tasks []taskRec, procExits []procExitRec, cgExits []cgExitRec) (r reading.Usage, delProcs []reading.ProcKey, delCgroups []uint64) {
	s.begin()
	for i := range tasks {
		s.task(&tasks[i])
	}
	return s.finish(procExits, cgExits)
}

// begin starts a read: task, once per iterator record, then finish.
func (s *state) begin() {
	s.pass++
	s.lastPS, s.lastCG = nil, nil
}

// task folds one record of the task iterator.
func (s *state) task(t *taskRec) {
	d := t.c
	pk := reading.ProcKey{PID: t.tgid, StartTime: t.leaderStart}
	ps := s.lastPS
	if ps == nil || pk != s.lastKey {
		ps = s.procs[pk]
		if ps == nil {
			ps = &procState{p: reading.ProcessUsage{Key: pk, Comm: cString(t.comm[:]), Cgroup: t.cgroup, CPU: int(t.cpu)}, comm: t.comm}
			s.procs[pk] = ps
		}
		s.lastKey, s.lastPS = pk, ps
	}
	if t.tid == t.tgid {
		// The leader names the process and says where it lives.
		if t.comm != ps.comm {
			ps.p.Comm, ps.comm = cString(t.comm[:]), t.comm
		}
		ps.p.Cgroup, ps.p.CPU = t.cgroup, int(t.cpu)
	}
	ps.p.CPUNs += d.runtime
	ps.p.Switches += d.switches
	ps.livePass = s.pass
	ps.grace = false

	cg := s.lastCG
	if cg == nil || cg.c.ID != t.cgroup {
		cg = s.cgroup(t.cgroup)
		s.lastCG = cg
	}
	cg.c.CPUNs += d.runtime
	cg.c.Switches += d.switches
	cg.livePass = s.pass
}

// finish folds the exit maps, read after the iterator, and returns the
// reading and the exit-map keys that have had their final read and must
// now be deleted.
func (s *state) finish(procExits []procExitRec, cgExits []cgExitRec) (r reading.Usage, delProcs []reading.ProcKey, delCgroups []uint64) {
	for i := range procExits {
		e := &procExits[i]
		d := e.c.sub(s.procExitLast[e.key])
		s.procExitLast[e.key] = e.c
		ps := s.procs[e.key]
		if ps == nil {
			// Started and ended between two reads.
			ps = &procState{p: reading.ProcessUsage{Key: e.key, Comm: e.comm, Cgroup: e.cgroup, CPU: -1}}
			s.procs[e.key] = ps
		}
		ps.p.CPUNs += d.runtime
		ps.p.Switches += d.switches
	}
	for i := range cgExits {
		e := &cgExits[i]
		cg := s.cgroup(e.id)
		d := e.c.sub(cg.exitLast)
		cg.exitLast, cg.hasExit = e.c, true
		cg.c.CPUNs += d.runtime
		cg.c.Switches += d.switches
		if d != (counters{}) {
			cg.idle = 0
		}
	}

	r.Processes = make([]reading.ProcessUsage, 0, len(s.procs))
	for k, ps := range s.procs {
		p := ps.p
		p.Alive = true
		if ps.livePass != s.pass {
			if !ps.grace {
				ps.grace = true
			} else {
				p.Alive = false
				delete(s.procs, k)
				if _, ok := s.procExitLast[k]; ok {
					delete(s.procExitLast, k)
					delProcs = append(delProcs, k)
				}
			}
		}
		r.Processes = append(r.Processes, p)
	}

	r.Cgroups = make([]reading.CgroupUsage, 0, len(s.cgroups))
	for id, cg := range s.cgroups {
		r.Cgroups = append(r.Cgroups, cg.c)
		if cg.livePass == s.pass {
			cg.idle = 0
			continue
		}
		cg.idle++
		if cg.idle >= cgIdlePasses {
			if cg.hasExit {
				delCgroups = append(delCgroups, id)
			}
			delete(s.cgroups, id)
		}
	}
	return r, delProcs, delCgroups
}
