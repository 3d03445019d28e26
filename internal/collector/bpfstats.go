package collector

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// NameBPFStats is the collector of the BPF programs' cost.
const NameBPFStats = "bpf-stats"

func init() {
	register(Registration{Name: NameBPFStats, Flag: true, DefaultOn: false,
		Help: "Export run time of wattrace's BPF programs. Turns on kernel BPF statistics, which costs every BPF program on the host ~50ns per run.",
		new:  func(o Options) subCollector { return newBPFStatsCollector(o.Programs) }})
}

// bpfStatsCollector exports the run time of wattrace's own BPF programs, so
// operators can see what accounting costs. The kernel only counts while BPF
// statistics are enabled (main does that when the collector is on).
type bpfStatsCollector struct {
	srcs          []ProgramStatsSource
	runTime, runs *desc
}

func newBPFStatsCollector(srcs []ProgramStatsSource) *bpfStatsCollector {
	return &bpfStatsCollector{
		srcs:    srcs,
		runTime: newDesc("bpf_program", "run_seconds_total", "Time the kernel spent running the BPF program while statistics were enabled.", "program"),
		runs:    newDesc("bpf_program", "runs_total", "Times the kernel ran the BPF program while statistics were enabled.", "program"),
	}
}

func (c *bpfStatsCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.runTime, c.runs)
}

// update does not need the snapshot: it asks the kernel directly.
func (c *bpfStatsCollector) update(out *sink, _ *snapshot.Snapshot) error {
	var ps []reading.ProgramStat
	for _, src := range c.srcs {
		p, err := src.ProgramStats()
		if err != nil {
			return fmt.Errorf("reading BPF program statistics: %w", err)
		}
		ps = append(ps, p...)
	}
	// Programs may share a name (the kernel truncates names to 15 bytes);
	// sum them rather than emit duplicate series.
	type agg struct {
		seconds float64
		runs    uint64
	}
	byName := make(map[string]*agg, len(ps))
	var order []string
	for _, p := range ps {
		a := byName[p.Name]
		if a == nil {
			a = &agg{}
			byName[p.Name] = a
			order = append(order, p.Name)
		}
		a.seconds += p.RunTime.Seconds()
		a.runs += p.RunCount
	}
	for _, name := range order {
		a := byName[name]
		out.add(c.runTime, prometheus.CounterValue, a.seconds, name)
		out.add(c.runs, prometheus.CounterValue, float64(a.runs), name)
	}
	return nil
}
