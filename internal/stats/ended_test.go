package stats

import (
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Only the ended processes the process families could export stay in
// snapshots: the N with the most energy. 50 processes run (process i
// uses i ms a second), then all but one end; with EndedProcesses 5 the
// snapshots keep the live one and the 5 ended ones with the most energy,
// each with its full energy; with 0 they keep all 50 for the retention.
func TestEndedProcessesKept(t *testing.T) {
	for _, c := range []struct {
		ended, want int
	}{{5, 6}, {0, 50}, {-1, 1}} {
		src := &fakeSource{}
		meter := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package"}}}
		l := mustLoop(t, Config{Retention: time.Hour, EndedProcesses: c.ended}, src, meter, anyName{})
		now := time.Unix(1_700_000_000, 0)
		for pid := uint32(1); pid <= 50; pid++ {
			src.add(1, pid, 0, 0)
		}
		l.Step(now)
		for s := 0; s < 3; s++ {
			for pid := uint32(1); pid <= 50; pid++ {
				src.add(1, pid, 0, uint64(pid)*uint64(time.Millisecond))
			}
			meter.samples[0].Joules += 10
			now = now.Add(time.Second)
			l.Step(now)
		}
		want := map[uint32]float64{}
		for _, p := range l.Snapshot().Processes {
			want[p.PID] = p.Energy.Get("package").DynamicJ
		}
		// Every process but 7 reports its end, then is gone from the
		// source; process 7 lives on.
		for i := range src.r.Processes {
			src.r.Processes[i].Alive = src.r.Processes[i].Key.PID == 7
		}
		now = now.Add(time.Second)
		l.Step(now)
		if got := len(l.Snapshot().Processes); got != 50 {
			t.Fatalf("ended %d: the step that saw them end publishes %d processes, want all 50", c.ended, got)
		}
		src.r.Processes = src.r.Processes[6:7]
		now = now.Add(time.Second)
		l.Step(now)
		s := l.Snapshot()
		if len(s.Processes) != c.want {
			t.Fatalf("ended %d: %d processes published, want %d", c.ended, len(s.Processes), c.want)
		}
		got := map[uint32]*snapshot.Consumer{}
		for _, p := range s.Processes {
			got[p.PID] = p
		}
		if _, ok := got[7]; !ok {
			t.Errorf("ended %d: the live process is gone", c.ended)
		}
		if c.ended == 5 {
			for pid := uint32(46); pid <= 50; pid++ {
				p, ok := got[pid]
				if !ok || p.Alive || p.Energy.Get("package").DynamicJ != want[pid] || want[pid] <= 0 {
					t.Errorf("ended process %d: %+v (kept %v), want its %.3f J", pid, p, ok, want[pid])
				}
			}
		}
	}
}

// Beyond the kept, an ended process stays while a live one has its labels
// (PID, comm, cgroup: their series are one), and only the ones past the
// kept go: one within the kept stays even when it has the labels of one
// that goes.
func TestEndedSharingLabels(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l := mustLoop(t, Config{EndedProcesses: 1, Retention: time.Minute}, src, m, names{1: "/a"})
	proc := func(pid uint32, start uint64, ns uint64) reading.ProcessUsage {
		return reading.ProcessUsage{Key: reading.ProcKey{PID: pid, StartTime: start}, Comm: "x", Cgroup: 1, Alive: true, CPUNs: ns}
	}
	src.r.Cgroups = []reading.CgroupUsage{{ID: 1}}
	src.r.Processes = []reading.ProcessUsage{proc(5, 1, 0), proc(5, 0, 0), proc(6, 0, 0), proc(6, 9, 0), proc(8, 0, 0)}
	t0 := time.Unix(100, 0)
	l.Step(t0)
	// Energy by CPU: the kept one (6/0) most, then its twin (6/9), 8/0
	// and the live one's twin (5/0) least.
	for i, ns := range []uint64{1e6, 1e7, 8e8, 5e7, 2e7} {
		src.r.Processes[i].CPUNs += ns
		src.r.Cgroups[0].CPUNs += ns
	}
	m.samples[0].Joules = 100
	l.Step(t0.Add(time.Second))
	for i := 1; i < 5; i++ {
		src.r.Processes[i].Alive = false
	}
	l.Step(t0.Add(2 * time.Second))
	src.r.Processes = src.r.Processes[:1]
	l.Step(t0.Add(3 * time.Second))
	got := map[reading.ProcKey]bool{}
	for k := range l.stages[0].(*ledger).procs {
		got[k] = true
	}
	for _, c := range []struct {
		pid   uint32
		start uint64
		kept  bool
	}{{5, 1, true}, {5, 0, true}, {6, 0, true}, {6, 9, false}, {8, 0, false}} {
		if k := (reading.ProcKey{PID: c.pid, StartTime: c.start}); got[k] != c.kept {
			t.Errorf("process %d (start %d): kept %v, want %v", c.pid, c.start, got[k], c.kept)
		}
	}
}
