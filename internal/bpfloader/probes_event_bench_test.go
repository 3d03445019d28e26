package bpfloader

import (
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"github.com/wattrace/wattrace/pkg/reading"
)

// BenchmarkProbesPerEvent is docs/performance.md's per-event figure: the counting probes (all
// but the perf counters) beside the do-nothing sched_switch floor, in one
// run, under `stress-ng --sock 1 --hdd 1 --switch 1` for 5 s, with a
// collection (Probes.Read) every second as the exporter does at its
// interval. Reports each program's ns per run and runs, the floor's, and
// ours-ns/event: everything our programs cost in the kernel in that run
// (event hooks plus whatever runs at collection and at task free) divided
// by the events the hooks saw, and that figure over the floor's.
func BenchmarkProbesPerEvent(b *testing.B) {
	const secs = 5
	statsOn(b, true)
	p, _ := loadProbesForTest(b, ProbeOptions{Disable: []string{reading.ProbeCounters}})
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
	dir := benchDiskDir(b)

	snap := func() map[string]reading.ProgramStat {
		stats, err := p.ProgramStats()
		if err != nil {
			b.Fatal(err)
		}
		fs, err := floor.FloorSwitch.Stats()
		if err != nil {
			b.Fatal(err)
		}
		stats = append(stats, reading.ProgramStat{Name: "floor_switch", RunTime: fs.Runtime, RunCount: fs.RunCount})
		m := map[string]reading.ProgramStat{}
		for _, s := range stats {
			m[s.Name] = s
		}
		return m
	}
	var before, after map[string]reading.ProgramStat
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.Read(); err != nil {
			b.Fatal(err)
		}
		before = snap()
		cmd := exec.Command("stress-ng", "--sock", "1", "--hdd", "1", "--switch", "1",
			"--temp-path", dir, "--timeout", "5s", "--quiet")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		tick := time.NewTicker(time.Second)
	wait:
		for {
			select {
			case err := <-done:
				if err != nil {
					b.Fatalf("stress-ng: %v", err)
				}
				break wait
			case <-tick.C:
				if _, err := p.Read(); err != nil {
					b.Fatal(err)
				}
			}
		}
		tick.Stop()
		if _, err := p.Read(); err != nil {
			b.Fatal(err)
		}
		after = snap()
	}
	b.StopTimer()

	names := make([]string, 0, len(after))
	for n := range after {
		names = append(names, n)
	}
	sort.Strings(names)
	var floorNs, events, ours float64
	for _, n := range names {
		runs := float64(after[n].RunCount - before[n].RunCount)
		rt := float64(after[n].RunTime - before[n].RunTime)
		if runs == 0 {
			continue
		}
		b.ReportMetric(rt/runs, n+"-ns/run")
		b.ReportMetric(runs/secs, n+"-runs/s")
		switch {
		case n == "floor_switch":
			floorNs = rt / runs
		case isEventProgram(n):
			events += runs
			ours += rt
		default: // collection and task-free programs: their cost, no events
			ours += rt
		}
	}
	if events > 0 && floorNs > 0 {
		b.ReportMetric(ours/events, "ours-ns/event")
		b.ReportMetric(ours/events/floorNs, "x-floor")
		b.ReportMetric(ours/1e9/secs*100, "ours-%cpu")
	}
}

// isEventProgram tells the probes' per-event hooks from what runs at
// collection time or at task free.
func isEventProgram(name string) bool {
	for _, d := range probeDefs {
		for _, v := range d.variants {
			for _, h := range v {
				if h.prog == name {
					return true
				}
			}
		}
	}
	return false
}
