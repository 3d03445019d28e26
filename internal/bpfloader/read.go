package bpfloader

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"unsafe"

	"github.com/wattrace/wattrace/pkg/reading"
)

// recSize is sizeof(struct task_rec) in bpf/accounting.bpf.c.
const recSize = int(unsafe.Sizeof(accountingTaskRec{}))

// eachTask decodes the iterator's records, laid out as bpf2go's twin of
// struct task_rec (accountingTaskRec, the host's layout: the objects are
// built for bpfel only), and hands each to fn, which must not keep the
// pointer. Each field is loaded from its offset in the record, as a
// little-endian load (a plain load on the hosts the objects run on, and
// safe whatever the buffer's alignment), straight into the taskRec, with
// no copy of the record first.
func eachTask(b []byte, fn func(*taskRec)) error {
	if len(b)%recSize != 0 {
		return fmt.Errorf("task iterator returned %d bytes, not a multiple of the %d-byte record", len(b), recSize)
	}
	var t taskRec
	for off := 0; off < len(b); off += recSize {
		r := b[off : off+recSize : off+recSize]
		t = taskRec{
			tid:         le.Uint32(r[offTid:]),
			tgid:        le.Uint32(r[offTgid:]),
			start:       le.Uint64(r[offStart:]),
			leaderStart: le.Uint64(r[offLeaderStart:]),
			cgroup:      le.Uint64(r[offCgroup:]),
			c:           counters{runtime: le.Uint64(r[offRuntime:]), switches: le.Uint64(r[offSwitches:])},
			cpu:         int32(le.Uint32(r[offCPU:])),
		}
		copy(t.comm[:], r[offComm:])
		fn(&t)
	}
	return nil
}

// The fields' offsets in a record, from the generated struct.
var le = binary.LittleEndian

const (
	offTid         = unsafe.Offsetof(accountingTaskRec{}.Tid)
	offTgid        = unsafe.Offsetof(accountingTaskRec{}.Tgid)
	offStart       = unsafe.Offsetof(accountingTaskRec{}.Start)
	offLeaderStart = unsafe.Offsetof(accountingTaskRec{}.LeaderStart)
	offCgroup      = unsafe.Offsetof(accountingTaskRec{}.Cgroup)
	offRuntime     = unsafe.Offsetof(accountingTaskRec{}.Runtime)
	offSwitches    = unsafe.Offsetof(accountingTaskRec{}.Switches)
	offCPU         = unsafe.Offsetof(accountingTaskRec{}.Cpu)
	offComm        = unsafe.Offsetof(accountingTaskRec{}.Comm)
)

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

func commString(c [16]int8) string {
	b := make([]byte, 0, 16)
	for _, v := range c {
		if v == 0 {
			break
		}
		b = append(b, byte(v))
	}
	return string(b)
}

// Read implements stats.Accounting. The iterator's records and the exit maps
// hold claims (see bpf/accounting.bpf.c): each nanosecond of a task's
// runtime is claimed by exactly one of the iterator, the exit hook and the
// free hook, so reading the maps after the iterator counts a task that
// exits in between once, now or on the next read.
func (a *Accounting) Read() (reading.Usage, error) {
	// Each record is folded into the state as it is read: at 10,000
	// tasks, holding the raw records and their decoded copies until the
	// iterator ended took 2 MB of heap.
	a.state.begin()
	if err := a.readTasks(a.state.task); err != nil {
		return reading.Usage{}, err
	}

	a.procExits = a.procExits[:0]
	err := a.procExitReader.each(a.objs.ExitedProcs, func(pk *accountingProcKey, pe *accountingProcExit) {
		a.procExits = append(a.procExits, procExitRec{
			key:    reading.ProcKey{PID: pk.Tgid, StartTime: pk.Start},
			c:      counters{runtime: pe.Runtime, switches: pe.Switches},
			cgroup: pe.Cgroup,
			comm:   commString(pe.Comm),
		})
	})
	if err != nil {
		return reading.Usage{}, fmt.Errorf("read exited_procs: %w", err)
	}
	a.cgExits = a.cgExits[:0]
	err = a.cgExitReader.each(a.objs.ExitedCgroups, func(id *uint64, c *accountingCounters) {
		a.cgExits = append(a.cgExits, cgExitRec{id: *id, c: counters{runtime: c.Runtime, switches: c.Switches}})
	})
	if err != nil {
		return reading.Usage{}, fmt.Errorf("read exited_cgroups: %w", err)
	}

	r, delProcs, delCgroups := a.state.finish(a.procExits, a.cgExits)
	a.delKeys = a.delKeys[:0]
	for _, k := range delProcs {
		a.delKeys = append(a.delKeys, accountingProcKey{Tgid: k.PID, Start: k.StartTime})
	}
	if err := deleteAll(a.objs.ExitedProcs, a.delKeys); err != nil {
		return r, fmt.Errorf("delete exited_procs entries of ended processes: %w", err)
	}
	if err := deleteAll(a.objs.ExitedCgroups, delCgroups); err != nil {
		return r, fmt.Errorf("delete exited_cgroups entries: %w", err)
	}
	return r, nil
}

// ExitedProcEntries reports how many per-process exit entries the map
// holds for processes of cgroup cg; tests use it to check that the dead
// don't pile up.
func (a *Accounting) ExitedProcEntries(cg uint64) (int, error) {
	var k accountingProcKey
	var v accountingProcExit
	n := 0
	it := a.objs.ExitedProcs.Iterate()
	for it.Next(&k, &v) {
		if v.Cgroup == cg {
			n++
		}
	}
	return n, it.Err()
}
