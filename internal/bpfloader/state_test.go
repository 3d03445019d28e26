package bpfloader

import (
	"bytes"
	"io"
	"testing"
	"testing/iotest"

	"github.com/wattrace/wattrace/pkg/reading"
)

func proc(r reading.Usage, pid uint32) (reading.ProcessUsage, bool) {
	for _, p := range r.Processes {
		if p.Key.PID == pid {
			return p, true
		}
	}
	return reading.ProcessUsage{}, false
}

func cg(r reading.Usage, id uint64) uint64 {
	for _, c := range r.Cgroups {
		if c.ID == id {
			return c.CPUNs
		}
	}
	return 0
}

// task is an iterator record: runtime is what the iterator claimed since the
// task was last reported, not its total.
func task(tid, tgid uint32, cgroup, runtime uint64) taskRec {
	return taskRec{tid: tid, tgid: tgid, start: uint64(tid) * 1000, leaderStart: uint64(tgid) * 1000,
		cgroup: cgroup, c: counters{runtime: runtime, switches: runtime / 10}, comm: [16]byte{'t'}}
}

// A process's threads come and go, a thread's remainder arrives through the
// exit maps, the process dies and is retired one read later.
func TestStateLifecycle(t *testing.T) {
	s := newState()
	pk := reading.ProcKey{PID: 10, StartTime: 10000}
	step := func(tasks []taskRec, pe []procExitRec, ce []cgExitRec) (reading.Usage, []reading.ProcKey) {
		r, dp, _ := s.update(tasks, pe, ce)
		return r, dp
	}
	check := func(r reading.Usage, wantProc, wantCg uint64, wantAlive bool) {
		t.Helper()
		p, ok := proc(r, 10)
		if !ok {
			t.Fatalf("process 10 missing")
		}
		if p.CPUNs != wantProc || p.Alive != wantAlive {
			t.Errorf("process: cpu %d alive %v, want %d %v", p.CPUNs, p.Alive, wantProc, wantAlive)
		}
		if got := cg(r, 1); got != wantCg {
			t.Errorf("cgroup 1: %d, want %d", got, wantCg)
		}
	}
	r, _ := step([]taskRec{task(10, 10, 1, 100)}, nil, nil)
	check(r, 100, 100, true)
	r, _ = step([]taskRec{task(10, 10, 1, 50), task(11, 10, 1, 30)}, nil, nil)
	check(r, 180, 180, true)
	// Thread 11 exited having run 5 ns more than the iterator claimed.
	r, _ = step([]taskRec{task(10, 10, 1, 50)},
		[]procExitRec{{key: pk, c: counters{runtime: 5}, cgroup: 1}},
		[]cgExitRec{{id: 1, c: counters{runtime: 5}}})
	check(r, 235, 235, true)
	// The leader is gone too; its remainder (7) is cumulative with the 5.
	r, dp := step(nil,
		[]procExitRec{{key: pk, c: counters{runtime: 12}, cgroup: 1}},
		[]cgExitRec{{id: 1, c: counters{runtime: 12}}})
	check(r, 242, 242, true)
	if len(dp) != 0 {
		t.Errorf("deleted %v during the grace read", dp)
	}
	r, dp = step(nil,
		[]procExitRec{{key: pk, c: counters{runtime: 12}, cgroup: 1}},
		[]cgExitRec{{id: 1, c: counters{runtime: 12}}})
	check(r, 242, 242, false)
	if len(dp) != 1 || dp[0] != pk {
		t.Errorf("deleted %v, want [%v]", dp, pk)
	}
	r, _ = step(nil, nil, []cgExitRec{{id: 1, c: counters{runtime: 12}}})
	if _, ok := proc(r, 10); ok {
		t.Errorf("retired process still reported")
	}
	if got := cg(r, 1); got != 242 {
		t.Errorf("cgroup kept %d after its process died, want 242", got)
	}
}

// A process that starts and ends between two reads is known only from the
// exit maps; it keeps its name and cgroup.
func TestStateShortLived(t *testing.T) {
	s := newState()
	pk := reading.ProcKey{PID: 20, StartTime: 1}
	r, _, _ := s.update(nil, []procExitRec{{key: pk, c: counters{runtime: 40, switches: 3}, cgroup: 2, comm: "sh"}},
		[]cgExitRec{{id: 2, c: counters{runtime: 40, switches: 3}}})
	p, ok := proc(r, 20)
	if !ok || p.CPUNs != 40 || p.Switches != 3 || p.Comm != "sh" || p.Cgroup != 2 || p.CPU != -1 {
		t.Fatalf("short-lived process: %+v", p)
	}
	if got := cg(r, 2); got != 40 {
		t.Errorf("cgroup 2: %d, want 40", got)
	}
}

// A thread that moves between cgroups: its runtime after the move goes to
// the new cgroup, and nothing goes backwards.
func TestStateMigration(t *testing.T) {
	s := newState()
	s.update([]taskRec{task(30, 30, 1, 100)}, nil, nil)
	r, _, _ := s.update([]taskRec{task(30, 30, 2, 60)}, nil, nil)
	if cg(r, 1) != 100 || cg(r, 2) != 60 {
		t.Errorf("after move: cgroup 1 %d (want 100), cgroup 2 %d (want 60)", cg(r, 1), cg(r, 2))
	}
	p, _ := proc(r, 30)
	if p.Cgroup != 2 || p.CPUNs != 160 {
		t.Errorf("process: %+v", p)
	}
}

// Idle cgroups are dropped, with their exit entries, after cgIdlePasses.
func TestStateIdleCgroupRetired(t *testing.T) {
	s := newState()
	var del []uint64
	for i := 0; i < cgIdlePasses+1; i++ {
		_, _, d := s.update(nil, nil, []cgExitRec{{id: 5, c: counters{runtime: 9}}})
		del = append(del, d...)
	}
	if len(del) != 1 || del[0] != 5 {
		t.Errorf("deleted %v, want [5]", del)
	}
}

// parseTasks collects eachTask's records.
func parseTasks(b []byte, out []taskRec) ([]taskRec, error) {
	err := eachTask(b, func(t *taskRec) { out = append(out, *t) })
	return out, err
}

func TestParseTasks(t *testing.T) {
	b := make([]byte, 2*recSize)
	b[0] = 7     // tid
	b[4] = 7     // tgid
	b[32] = 0x10 // runtime
	b[48] = 0xff // cpu = -1 …
	b[49], b[50], b[51] = 0xff, 0xff, 0xff
	copy(b[56:], "bash\x00junk")
	got, err := parseTasks(b, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].tid != 7 || got[0].c.runtime != 16 || got[0].cpu != -1 || cString(got[0].comm[:]) != "bash" {
		t.Errorf("parsed %+v", got[0])
	}
	if _, err := parseTasks(b[:recSize+1], nil); err == nil {
		t.Error("a truncated record was accepted")
	}
}

// Records split between reads (as a read of the iterator may end inside
// one) are carried over and decoded whole; a stream that ends inside a
// record is an error.
func TestStreamTasksAcrossReads(t *testing.T) {
	const n = 50
	b := make([]byte, n*recSize)
	for i := 0; i < n; i++ {
		b[i*recSize] = byte(i + 1)    // tid
		b[i*recSize+32] = byte(2 * i) // runtime
	}
	for _, r := range []struct {
		name string
		r    io.Reader
	}{
		{"one byte per read", iotest.OneByteReader(bytes.NewReader(b))},
		{"half of each read", iotest.HalfReader(bytes.NewReader(b))},
		{"whole", bytes.NewReader(b)},
	} {
		var got []taskRec
		err := streamTasks(r.r, make([]byte, recSize+7), func(t *taskRec) { got = append(got, *t) })
		if err != nil {
			t.Fatalf("%s: %v", r.name, err)
		}
		if len(got) != n {
			t.Fatalf("%s: %d records, want %d", r.name, len(got), n)
		}
		for i, g := range got {
			if g.tid != uint32(i+1) || g.c.runtime != uint64(2*i) {
				t.Fatalf("%s: record %d = tid %d runtime %d", r.name, i, g.tid, g.c.runtime)
			}
		}
	}
	err := streamTasks(bytes.NewReader(b[:3*recSize+5]), make([]byte, 2*recSize), func(*taskRec) {})
	if err == nil {
		t.Error("a stream ending inside a record was accepted")
	}
}

// The fold remembers the last record's process and cgroup to skip their
// map lookups; records of a process that are not adjacent, a thread in
// another cgroup than its leader, and a PID of a new process (another start
// time) after the old one's threads each go to their own counters, in
// every read.
func TestStateFoldsInterleavedThreads(t *testing.T) {
	s := newState()
	reused := task(30, 30, 2, 5) // PID 10 again, a later process
	reused.tgid, reused.leaderStart = 10, 99000
	tasks := []taskRec{task(10, 10, 1, 100), task(11, 10, 1, 10), task(20, 20, 1, 7), task(12, 10, 2, 1), task(13, 10, 1, 1000), reused}
	for read := 1; read <= 2; read++ {
		r, _, _ := s.update(tasks, nil, nil)
		if p, _ := proc(r, 20); p.CPUNs != uint64(7*read) {
			t.Errorf("read %d: process 20 %d ns, want %d", read, p.CPUNs, 7*read)
		}
		var old, newer uint64
		for _, p := range r.Processes {
			if p.Key == (reading.ProcKey{PID: 10, StartTime: 10000}) {
				old = p.CPUNs
			} else if p.Key == (reading.ProcKey{PID: 10, StartTime: 99000}) {
				newer = p.CPUNs
			}
		}
		if old != uint64(1111*read) || newer != uint64(5*read) {
			t.Errorf("read %d: PID 10's first process %d ns, its second %d; want %d, %d", read, old, newer, 1111*read, 5*read)
		}
		if cg(r, 1) != uint64(1117*read) || cg(r, 2) != uint64(6*read) {
			t.Errorf("read %d: cgroups %d and %d ns, want %d and %d", read, cg(r, 1), cg(r, 2), 1117*read, 6*read)
		}
	}
}
