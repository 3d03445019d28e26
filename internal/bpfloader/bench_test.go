package bpfloader

import (
	"os/exec"
	"strconv"
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
// tp_btf/sched_switch program (the floor) attached beside ours. Of ours,
// the dead hook runs at every context switch (and returns at its first
// comparison unless the task is dead); the exit, free and fork hooks run
// per task, and their cost spread over the switches of the same run is
// what they add per context switch.
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

	progs := []*ebpf.Program{a.objs.TaskDead, a.objs.TaskExit, a.objs.TaskFree, a.objs.TaskFork}
	var floorRuns uint64
	var floorNs, deadNs, oursNs float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s0 := progStats(b, progs)
		floorRuns, floorNs = statDelta(b, floor.FloorSwitch, func() {
			stress(b, "--switch", "2", "--timeout", "3s", "--quiet")
		})
		s1 := progStats(b, progs)
		oursNs = 0
		for j := range progs {
			oursNs += float64(s1[j].Runtime - s0[j].Runtime)
		}
		if runs := s1[0].RunCount - s0[0].RunCount; runs > 0 {
			deadNs = float64(s1[0].Runtime-s0[0].Runtime) / float64(runs)
		}
	}
	b.ReportMetric(floorNs, "floor-ns/switch")
	b.ReportMetric(deadNs, "dead-ns/switch")
	b.ReportMetric(oursNs/float64(max(floorRuns, 1)), "ours-ns/switch")
	b.ReportMetric(float64(floorRuns)/3, "switches/s")
}

func progStats(b *testing.B, progs []*ebpf.Program) []ebpf.ProgramStats {
	b.Helper()
	out := make([]ebpf.ProgramStats, len(progs))
	for i, p := range progs {
		st, err := p.Stats()
		if err != nil {
			b.Fatal(err)
		}
		out[i] = *st
	}
	return out
}

// BenchmarkTaskFree measures the hooks that see a task end, per exiting
// task, and the fork hook per new task, under a fork load. The dead hook's
// figure is what it cost in all (its runs at every other context switch
// included) divided by the exits.
func BenchmarkTaskFree(b *testing.B) {
	statsOn(b, true)
	a, _, _ := loadForTest(b)
	progs := []*ebpf.Program{a.objs.TaskExit, a.objs.TaskFree, a.objs.TaskFork, a.objs.TaskDead}
	var d [4]struct {
		runs uint64
		ns   float64
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s0 := progStats(b, progs)
		stress(b, "--fork", "2", "--timeout", "3s", "--quiet")
		s1 := progStats(b, progs)
		for j := range progs {
			d[j].runs = s1[j].RunCount - s0[j].RunCount
			d[j].ns = float64(s1[j].Runtime - s0[j].Runtime)
		}
	}
	exits := float64(max(d[0].runs, 1))
	b.ReportMetric(d[0].ns/exits, "exit-ns/exit")
	b.ReportMetric(d[1].ns/float64(max(d[1].runs, 1)), "free-ns/exit")
	b.ReportMetric(d[2].ns/float64(max(d[2].runs, 1)), "fork-ns/fork")
	b.ReportMetric(d[3].ns/exits, "dead-ns/exit")
	b.ReportMetric(float64(d[0].runs)/3, "exits/s")
	b.ReportMetric(float64(d[1].runs)/3, "frees/s")
}

// BenchmarkTaskMove measures the move hook per cgroup move: a shell moves
// itself between two cgroups of the key hierarchy b.N times.
func BenchmarkTaskMove(b *testing.B) {
	statsOn(b, false)
	a, h, _ := loadForTest(b)
	x, y := testenv.Cgroup(b, h.Mount, "move-x"), testenv.Cgroup(b, h.Mount, "move-y")
	var runs uint64
	var ns float64
	b.ResetTimer()
	runs, ns = statDelta(b, a.objs.TaskMove, func() {
		script := `i=0; while [ $i -lt ` + strconv.Itoa(b.N) + ` ]; do echo $$ > "$0/cgroup.procs"; echo $$ > "$1/cgroup.procs"; i=$((i+1)); done`
		if out, err := exec.Command("/bin/sh", "-c", script, x, y).CombinedOutput(); err != nil {
			b.Fatalf("mover: %v: %s", err, out)
		}
	})
	b.StopTimer()
	if runs < uint64(2*b.N) {
		b.Fatalf("move hook ran %d times for %d moves", runs, 2*b.N)
	}
	b.ReportMetric(ns, "move-ns/move")
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
