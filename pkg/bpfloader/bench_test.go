package bpfloader

import (
	"os/exec"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/wattrace/wattrace/internal/testenv"
)

func statDelta(b *testing.B, p *ebpf.Program, f func()) (runs uint64, nsPerRun float64) {
	b.Helper()
	s0, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	f()
	s1, err := p.Stats()
	if err != nil {
		b.Fatal(err)
	}
	runs = s1.RunCount - s0.RunCount
	if runs > 0 {
		nsPerRun = float64(s1.Runtime-s0.Runtime) / float64(runs)
	}
	return runs, nsPerRun
}

// statsOn needs root and turns the kernel's BPF statistics on for the
// benchmark; needLoad also needs stress-ng for the load
// (installed when missing).
func statsOn(b *testing.B, needLoad bool) {
	b.Helper()
	testenv.RequireRoot(b)
	if needLoad {
		testenv.Tool(b, "stress-ng", "stress-ng")
	}
	st, err := EnableStats()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
}

func stress(b *testing.B, args ...string) {
	b.Helper()
	if out, err := exec.Command("stress-ng", args...).CombinedOutput(); err != nil {
		b.Fatalf("stress-ng %v: %v\n%s", args, err, out)
	}
}

// BenchmarkSchedSwitchCost runs a context-switch load with a do-nothing
// tp_btf/sched_switch program (the floor) attached beside ours. Ours attach
// nothing at sched_switch, so what they cost per context switch is zero;
// the floor's ns per run is what any program there would cost at least.
func BenchmarkSchedSwitchCost(b *testing.B) {
	statsOn(b, true)
	a, _, _ := loadForTest(b)
	var floor floorObjects
	if err := loadFloorObjects(&floor, nil); err != nil {
		b.Fatal(err)
	}
	defer floor.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: floor.FloorSwitch})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()

	var floorRuns, exitRuns, freeRuns uint64
	var floorNs, exitNs, freeNs float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		exitRuns, exitNs = statDelta(b, a.objs.TaskExit, func() {
			freeRuns, freeNs = statDelta(b, a.objs.TaskFree, func() {
				floorRuns, floorNs = statDelta(b, floor.FloorSwitch, func() {
					stress(b, "--switch", "2", "--timeout", "3s", "--quiet")
				})
			})
		})
	}
	// Of ours only the exit and free hooks run in the kernel on their own,
	// once per exiting task each; their cost spread over the switches of
	// the same run is what they add per context switch.
	b.ReportMetric(floorNs, "floor-ns/switch")
	b.ReportMetric((float64(exitRuns)*exitNs+float64(freeRuns)*freeNs)/float64(max(floorRuns, 1)), "ours-ns/switch")
	b.ReportMetric(float64(floorRuns)/3, "switches/s")
}

// BenchmarkTaskFree measures the exit and free hooks per exiting task under
// a fork load.
func BenchmarkTaskFree(b *testing.B) {
	statsOn(b, true)
	a, _, _ := loadForTest(b)
	var exitRuns, freeRuns uint64
	var exitNs, freeNs float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		exitRuns, exitNs = statDelta(b, a.objs.TaskExit, func() {
			freeRuns, freeNs = statDelta(b, a.objs.TaskFree, func() {
				stress(b, "--fork", "2", "--timeout", "3s", "--quiet")
			})
		})
	}
	b.ReportMetric(exitNs, "exit-ns/exit")
	b.ReportMetric(freeNs, "free-ns/exit")
	b.ReportMetric(float64(exitRuns)/3, "exits/s")
	b.ReportMetric(float64(freeRuns)/3, "frees/s")
}

// BenchmarkRead measures one collection: the task iterator over every task
// on the machine plus the exit maps, in user-space time per read; the
// kernel side of the iterator is reported per task.
func BenchmarkRead(b *testing.B) {
	statsOn(b, false)
	a, _, _ := loadForTest(b)
	var tasks int
	// The first read creates every task's storage; measure steady reads.
	if _, err := a.Read(); err != nil {
		b.Fatal(err)
	}
	_, ns := statDelta(b, a.objs.DumpTask, func() {
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r, err := a.Read()
			if err != nil {
				b.Fatal(err)
			}
			tasks = len(r.Processes)
		}
		b.StopTimer()
	})
	b.ReportMetric(ns, "iter-ns/task")
	b.ReportMetric(float64(tasks), "processes")
}
