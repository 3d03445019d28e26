package stats

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fixedSnapshot serves one snapshot to a collector.
type fixedSnapshot struct{ s *snapshot.Snapshot }

func (f fixedSnapshot) Snapshot() *snapshot.Snapshot { return f.s }

func recordOf(t *testing.T, ws []*snapshot.Consumer, pid uint32, cgroup uint64) *snapshot.Consumer {
	t.Helper()
	for _, w := range ws {
		if w.PID == pid && w.CgroupID == cgroup {
			return w
		}
	}
	t.Fatalf("no record of pid %d, cgroup %d", pid, cgroup)
	return nil
}

// A consumer that did not change since the last step is published as the
// record the last snapshot holds, not a copy; one that changed gets a new
// record, and the old snapshot keeps the old one: a collector reading the
// old snapshot after later steps sees the figures of its interval.
func TestUnchangedRecordsShared(t *testing.T) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0, Joules: 0}}}
	// Process 1 works in cgroup 10; process 2 sleeps in cgroup 20.
	src.add(10, 1, 0, 1e9)
	src.add(20, 2, 0, 5e8)
	l := mustLoop(t, Config{}, src, m, names{10: "/busy", 20: "/idle"})
	t0 := time.Unix(1000, 0)
	l.Step(t0)
	src.add(10, 1, 0, 1e9)
	m.samples[0].Joules += 50
	l.Step(t0.Add(time.Second))
	s1 := l.Snapshot()

	src.add(10, 1, 0, 2e9)
	m.samples[0].Joules += 80
	l.Step(t0.Add(2 * time.Second))
	s2 := l.Snapshot()

	busy1, busy2 := recordOf(t, s1.Processes, 1, 10), recordOf(t, s2.Processes, 1, 10)
	idle1, idle2 := recordOf(t, s1.Processes, 2, 20), recordOf(t, s2.Processes, 2, 20)
	if idle1 != idle2 {
		t.Errorf("the sleeping process has a new record in the second snapshot: %p, %p", idle1, idle2)
	}
	if c1, c2 := recordOf(t, s1.Cgroups, 0, 20), recordOf(t, s2.Cgroups, 0, 20); c1 != c2 {
		t.Errorf("the idle cgroup has a new record in the second snapshot: %p, %p", c1, c2)
	}
	if busy1 == busy2 {
		t.Fatal("the working process's record is shared between snapshots of different figures")
	}
	if recordOf(t, s1.Cgroups, 0, 10) == recordOf(t, s2.Cgroups, 0, 10) {
		t.Error("the busy cgroup's record is shared between snapshots of different figures")
	}
	// CPU seconds count from before the baseline (1 s), energy from it.
	if busy1.CPUSeconds != 2 || busy2.CPUSeconds != 4 || busy1.Energy.Get("package").DynamicJ != 50 ||
		busy2.Energy.Get("package").DynamicJ != 130 {
		t.Errorf("working process: %v s %v J, then %v s %v J; want 2 s 50 J, then 4 s 130 J",
			busy1.CPUSeconds, busy1.Energy.Get("package").DynamicJ, busy2.CPUSeconds, busy2.Energy.Get("package").DynamicJ)
	}

	// The old snapshot, read after two more steps, says what it said.
	src.add(10, 1, 0, 4e9)
	m.samples[0].Joules += 100
	l.Step(t0.Add(3 * time.Second))
	l.Step(t0.Add(4 * time.Second))
	e, err := collector.New(fixedSnapshot{s1}, collector.Options{Enabled: map[string]bool{collector.NameProcess: true}})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	want := `
# HELP wattrace_process_cpu_seconds_total CPU time used by the process, all threads included.
# TYPE wattrace_process_cpu_seconds_total counter
wattrace_process_cpu_seconds_total{cgroup="/busy",comm="",pid="1"} 2
wattrace_process_cpu_seconds_total{cgroup="/idle",comm="",pid="2"} 0.5
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "wattrace_process_cpu_seconds_total"); err != nil {
		t.Error(err)
	}
	if busy1.CPUSeconds != 2 || busy1.Energy.Get("package").DynamicJ != 50 {
		t.Errorf("the first snapshot's record of the working process changed to %v s %v J", busy1.CPUSeconds, busy1.Energy.Get("package").DynamicJ)
	}
	if got := recordOf(t, l.Snapshot().Processes, 2, 20); got != idle1 {
		t.Errorf("the sleeping process's record changed over four steps without change")
	}
}

// BenchmarkStepMostlyIdle is one interval over 10,000 processes in 1,000
// cgroups of which 1% work in each interval, as on a node whose processes
// mostly sleep: the step's time and garbage, of which publishing the
// consumers' records was the largest part while every snapshot copied
// every consumer.
func BenchmarkStepMostlyIdle(b *testing.B) {
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	paths := names{}
	for cg := uint64(1); cg <= 1000; cg++ {
		paths[cg] = fmt.Sprintf("/bench/job-%04d", cg)
		src.r.Cgroups = append(src.r.Cgroups, reading.CgroupUsage{ID: cg})
		for i := range uint32(10) {
			src.r.Processes = append(src.r.Processes, reading.ProcessUsage{Key: reading.ProcKey{PID: uint32(cg)*10 + i}, Cgroup: cg, Alive: true})
		}
	}
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none", CPUs: 2}, src, m, paths, nil)
	if err != nil {
		b.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	l.Step(t0)
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		// A different 1% of the processes works in each interval.
		for i := n % 100; i < len(src.r.Processes); i += 100 {
			p := &src.r.Processes[i]
			p.CPUNs += 1e6
			src.r.Cgroups[p.Cgroup-1].CPUNs += 1e6
		}
		m.samples[0].Joules += 20
		t0 = t0.Add(time.Second)
		l.Step(t0)
	}
}
