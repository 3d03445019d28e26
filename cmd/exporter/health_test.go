package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// Every configured source that fails shows it: the meter opened through
// the meter table (RAPL from a fixture tree) and the procfs accounting
// report their health into the snapshot, and a RAPL reading that steps
// back reaches wattrace_source_rejected_readings_total{source="rapl"}.
func TestSourceHealthExported(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testConfig(t)
	cfg.Path.Sysfs = testenv.CopyFixture(t, "../../pkg/power/testdata/rapl-1socket")
	cfg.Power.IPMI = "off"
	cfg.Accounting.Mode = "procfs"
	meter, err := openMeter(context.Background(), cfg, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	hier, err := cgroup.Detect(cfg.Path.Procfs, cfg.Path.Cgroupfs, cfg.Cgroup.Hierarchy)
	if err != nil {
		t.Fatal(err)
	}
	res := cgroup.NewResolver(hier)
	acc, err := openAccounting(cfg, hier, res, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	loop, err := stats.New(stats.Config{Interval: time.Second, CPUs: 2, IdlePolicy: "none"}, acc.src, meter, res, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	energy := filepath.Join(cfg.Path.Sysfs, "class/powercap/intel-rapl:0/energy_uj")
	write := func(uj string) {
		if err := os.WriteFile(energy, []byte(uj+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now()
	loop.Step(t0)     // the fixture's 12 J
	write("12001000") // 1 mJ more
	loop.Step(t0.Add(time.Second))
	write("2000000") // 10 J back: a glitch, not a wrap
	loop.Step(t0.Add(2 * time.Second))

	sources := map[string]bool{}
	for _, h := range loop.Snapshot().Meters {
		sources[h.Source] = h.Up
	}
	if !sources["rapl"] || !sources["procfs"] {
		t.Fatalf("source health %v, want rapl and procfs up", sources)
	}
	exp, err := collector.New(loop, collector.Options{Enabled: map[string]bool{}, MeterHealth: true, Log: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(exp)
	want := `
# HELP wattrace_source_rejected_readings_total Readings a source gave that validation refused (not finite, out of range, a counter going backwards), by reason; they were never credited. Any increase means a meter or file is misbehaving.
# TYPE wattrace_source_rejected_readings_total counter
wattrace_source_rejected_readings_total{reason="backwards",source="rapl"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "wattrace_source_rejected_readings_total"); err != nil {
		t.Error(err)
	}
	up := `
# HELP wattrace_source_up 1 if the source's latest read succeeded.
# TYPE wattrace_source_up gauge
wattrace_source_up{source="procfs"} 1
wattrace_source_up{source="rapl"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(up), "wattrace_source_up"); err != nil {
		t.Error(err)
	}
}
