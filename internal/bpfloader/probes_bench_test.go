package bpfloader

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/reading"
)

// BenchmarkProbesCost attaches every probe (the counters probe with the
// cpu-clock stand-in, since this machine has no PMU) beside the do-nothing
// sched_switch floor, runs a context-switch load together with file reads,
// writes, O_DIRECT writes and loopback TCP for 3 s, and reports each
// program's ns per run as the kernel counts it (BPF_ENABLE_STATS), all in
// the same run.
func BenchmarkProbesCost(b *testing.B) {
	statsOn(b, true)
	p, _ := loadProbesForTest(b, ProbeOptions{Counters: []CounterEvent{cpuClock}})
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

	before := map[string]reading.ProgramStat{}
	after := map[string]reading.ProgramStat{}
	snap := func(into map[string]reading.ProgramStat) {
		stats, err := p.ProgramStats()
		if err != nil {
			b.Fatal(err)
		}
		fs, err := floor.FloorSwitch.Stats()
		if err != nil {
			b.Fatal(err)
		}
		stats = append(stats, reading.ProgramStat{Name: "floor_switch", RunTime: fs.Runtime, RunCount: fs.RunCount})
		for _, s := range stats {
			into[s.Name] = s
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		snap(before)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			stress(b, "--switch", "1", "--timeout", "3s", "--quiet")
		}()
		ioLoad(b, dir, time.Now().Add(3*time.Second))
		wg.Wait()
		snap(after)
	}
	b.StopTimer()
	names := make([]string, 0, len(after))
	for n := range after {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		runs := after[n].RunCount - before[n].RunCount
		if runs == 0 {
			continue
		}
		ns := float64(after[n].RunTime-before[n].RunTime) / float64(runs)
		b.ReportMetric(ns, n+"-ns/run")
		b.ReportMetric(float64(runs)/3, n+"-runs/s")
	}
}

func benchDiskDir(b *testing.B) string {
	b.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "wattrace-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// ioLoad reads a cached file, drops and rereads it, writes files buffered
// and with O_DIRECT, and sends over loopback TCP until the deadline.
func ioLoad(b *testing.B, dir string, deadline time.Time) {
	b.Helper()
	path := filepath.Join(dir, "f")
	data := make([]byte, 4<<20)
	for i := 0; time.Now().Before(deadline); i++ {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			b.Fatal(err)
		}
		f, err := os.Open(path)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 64<<10)
		for pass := 0; pass < 4; pass++ {
			if pass == 3 {
				_ = f.Sync()
				_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
			}
			for off := int64(0); off < int64(len(data)); off += int64(len(buf)) {
				if _, err := f.ReadAt(buf, off); err != nil {
					b.Fatal(err)
				}
			}
		}
		f.Close()
		if err := probeChild([]string{"direct", filepath.Join(dir, "d"), fmt.Sprint(1 << 20)}); err != nil {
			b.Fatal(err)
		}
		loopbackTCP(b, 4<<20)
	}
}
