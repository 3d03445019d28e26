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
