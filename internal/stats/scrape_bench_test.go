package stats

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// BenchmarkColdScrape10k is a scrape that steps the loop and renders the
// new snapshot itself (the scrape that finds the figures older than
// stats.interval), on a node of 10,000 processes in 1,000 cgroups, as
// BenchmarkScale's largest population but with the accounting faked: a
// different 1% of the processes works in each interval, 10 of them end and
// 10 new ones start, the real cgroup resolver names the cgroups (1,000
// directories of a temporary directory) and the collectors the exporter
// runs by default plus the process families' top 20 render the snapshot in
// the text format. What it leaves out is the source's own read (the
// kernel's task walk and its decoding, bpfloader's BenchmarkDecodeTasks)
// and the HTTP round trip.
func BenchmarkColdScrape10k(b *testing.B) {
	const cgroups, perCgroup, churn = 1000, 10, 10
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "dram", Socket: 0}}}
	// The cgroups are directories named and checked by the real resolver
	// (ids are their inode numbers), in a temporary directory rather than
	// cgroupfs.
	root := b.TempDir()
	res := cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.Kind("cpuacct"), Mount: root})
	ids := make([]uint64, 0, cgroups)
	for n := range cgroups {
		dir := filepath.Join(root, "bench", fmt.Sprintf("job-%04d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		fi, err := os.Stat(dir)
		if err != nil {
			b.Fatal(err)
		}
		cg := fi.Sys().(*syscall.Stat_t).Ino
		ids = append(ids, cg)
		src.r.Cgroups = append(src.r.Cgroups, reading.CgroupUsage{ID: cg})
		for i := range uint32(perCgroup) {
			src.r.Processes = append(src.r.Processes, reading.ProcessUsage{Key: reading.ProcKey{PID: uint32(n+1)*perCgroup + i, StartTime: 1},
				Comm: fmt.Sprintf("proc-%d", i), Cgroup: cg, Alive: true})
		}
	}
	cgIndex := make(map[uint64]int, cgroups)
	for i, id := range ids {
		cgIndex[id] = i
	}
	units := workload.NewResolver(workload.Options{EtcRoot: b.TempDir(), ProcRoot: b.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: 5 * time.Minute, IdlePolicy: "none", CPUs: 2, EndedProcesses: 20},
		src, m, res, nil, WithWorkloads(units, ident.Levels()))
	if err != nil {
		b.Fatal(err)
	}
	exp, err := collector.New(l, collector.Options{
		Enabled: map[string]bool{collector.NameNode: true, collector.NameCgroup: true, collector.NameProcess: true,
			collector.NameProbes: true, collector.NameGPU: true},
		Levels: ident.Levels(), Emissions: true,
	})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry() // as the exporter's
	reg.MustRegister(exp)
	t0 := time.Unix(0, 0)
	l.Step(t0)
	nextPID := uint32(cgroups*perCgroup + perCgroup)
	step := func(n int) {
		// The processes that ended last interval leave the reading; as
		// many new ones start; a different 1% works.
		procs := src.r.Processes[:0]
		for _, p := range src.r.Processes {
			if p.Alive {
				procs = append(procs, p)
			}
		}
		for i := range churn {
			nextPID++
			cg := ids[(n*churn+i)%cgroups]
			procs = append(procs, reading.ProcessUsage{Key: reading.ProcKey{PID: nextPID, StartTime: uint64(n + 2)}, Comm: "short", Cgroup: cg, Alive: true})
		}
		src.r.Processes = procs
		for i := n % 100; i < len(procs); i += 100 {
			p := &procs[i]
			p.CPUNs += 1e6
			src.r.Cgroups[cgIndex[p.Cgroup]].CPUNs += 1e6
		}
		for i := range churn {
			procs[(n*7919+i*101)%len(procs)].Alive = false
		}
		m.samples[0].Joules += 20
		m.samples[1].Joules += 4
		t0 = t0.Add(15 * time.Second)
		l.Step(t0)
	}
	render := func() int {
		fams, err := reg.Gather()
		if err != nil {
			b.Fatal(err)
		}
		enc := expfmt.NewEncoder(io.Discard, expfmt.NewFormat(expfmt.TypeTextPlain))
		series := 0
		for _, f := range fams {
			series += len(f.Metric)
			if err := enc.Encode(f); err != nil {
				b.Fatal(err)
			}
		}
		return series
	}
	for n := range 3 {
		step(n)
	}
	series := render()
	b.ReportAllocs()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		step(n + 3)
		render()
	}
	b.ReportMetric(float64(series), "series")
}
