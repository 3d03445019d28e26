package collector

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// bpfStatsCollector exports the run time of wattrace's own BPF programs, so
// operators can see what accounting costs. The kernel only counts while BPF
// statistics are enabled (main does that when the collector is on).
type bpfStatsCollector struct {
	src           ProgramStatsSource
	runTime, runs *prometheus.Desc
}

func newBPFStatsCollector(src ProgramStatsSource) *bpfStatsCollector {
	return &bpfStatsCollector{
		src: src,
		runTime: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "bpf_program", "run_seconds_total"),
			"Time the kernel spent running the BPF program while statistics were enabled.",
			[]string{"program"}, nil),
		runs: prometheus.NewDesc(
			prometheus.BuildFQName(namespace, "bpf_program", "runs_total"),
			"Times the kernel ran the BPF program while statistics were enabled.",
			[]string{"program"}, nil),
	}
}

func (c *bpfStatsCollector) describe(ch chan<- *prometheus.Desc) {
	ch <- c.runTime
	ch <- c.runs
}

// update does not need the snapshot: it asks the kernel directly.
func (c *bpfStatsCollector) update(ch chan<- prometheus.Metric, _ *snapshot.Snapshot) error {
	ps, err := c.src.ProgramStats()
	if err != nil {
		return fmt.Errorf("reading BPF program statistics: %w", err)
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
		ch <- metric(c.runTime, prometheus.CounterValue, a.seconds, name)
		ch <- metric(c.runs, prometheus.CounterValue, float64(a.runs), name)
	}
	return nil
}
