package bpfloader

import (
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// iterRuns sums the runs of every task-iterator program of the accounting
// and the probes, as their program statistics (the exporter's
// wattrace_bpf_program_runs_total) count them: one run per task visited.
func iterRuns(t *testing.T, a *Accounting, p *Probes) uint64 {
	t.Helper()
	var ps []reading.ProgramStat
	for _, src := range []interface {
		ProgramStats() ([]reading.ProgramStat, error)
	}{a, p} {
		s, err := src.ProgramStats()
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, s...)
	}
	var n uint64
	for _, s := range ps {
		if s.Name == "dump_task" || s.Name == foldIterProg {
			n += s.RunCount
		}
	}
	return n
}

// A read of the accounting then of the probes, as each step of the stats
// loop does, walks the node's tasks once: the accounting's iterator folds
// the probes' counters on its way, and the probes do not walk again. Two
// walks (the accounting's and the probes' fold) visit every task twice.
func TestOneTaskWalkPerRead(t *testing.T) {
	a, _, _ := loadForTest(t)
	p, _ := loadProbesForTest(t, ProbeOptions{Disable: []string{reading.ProbeCounters}, Accounting: a})
	st, err := EnableStats()
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	const reads = 5
	before := iterRuns(t, a, p)
	tasks := 0
	for range reads {
		tasks += testenv.LiveTasks(t)
		if _, err := a.Read(); err != nil {
			t.Fatal(err)
		}
		if _, err := p.Read(); err != nil {
			t.Fatal(err)
		}
		tasks += testenv.LiveTasks(t)
	}
	visits := float64(iterRuns(t, a, p) - before)
	perRead := float64(tasks) / 2 / reads
	walks := visits / reads / perRead
	t.Logf("%d reads: %.0f task visits, %.0f tasks per read: %.2f walks per read", reads, visits, perRead, walks)
	// Other processes on the node come and go between the counts; the
	// iterator also runs once more at each walk's end, with no task.
	if walks < 0.8 || walks > 1.3 {
		t.Errorf("%.2f walks of the tasks per read of the accounting and the probes, want 1", walks)
	}

	// Without the accounting's walk since the last read, the probes walk
	// themselves: their counters are never left unfolded.
	own := foldRuns(t, p)
	if _, err := p.Read(); err != nil {
		t.Fatal(err)
	}
	if n := foldRuns(t, p) - own; n < uint64(testenv.LiveTasks(t))/2 {
		t.Errorf("a read of the probes alone ran their fold over %d tasks, want every task", n)
	}
}

// BenchmarkReadWithProbes is one step's reads of the accounting and the
// probes, as the stats loop makes them: with the probes folded by the
// accounting's walk (one walk of the tasks) and with the probes walking
// the tasks again themselves (two), which is how they read before. It
// reports the wall time of both reads and the kernel time of the task
// iterators per read.
func BenchmarkReadWithProbes(b *testing.B) {
	statsOn(b, false)
	for _, shared := range []bool{true, false} {
		name := "walks=2"
		if shared {
			name = "walks=1"
		}
		b.Run(name, func(b *testing.B) {
			a, _, _ := loadForTest(b)
			o := ProbeOptions{Disable: []string{reading.ProbeCounters}}
			if shared {
				o.Accounting = a
			}
			p, _ := loadProbesForTest(b, o)
			iters := []*ebpf.Program{a.objs.DumpTask, p.progs[foldIterProg]}
			runtime := func() time.Duration {
				var d time.Duration
				for _, prog := range iters {
					s, err := prog.Stats()
					if err != nil {
						b.Fatal(err)
					}
					d += s.Runtime
				}
				return d
			}
			read := func() {
				if _, err := a.Read(); err != nil {
					b.Fatal(err)
				}
				if _, err := p.ReadCgroups(); err != nil {
					b.Fatal(err)
				}
			}
			read() // every task's storage made
			k0 := runtime()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				read()
			}
			b.StopTimer()
			b.ReportMetric(float64(runtime()-k0)/float64(b.N)/1e6, "iter-kernel-ms/read")
		})
	}
}
