package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

type fakeSource struct{ snap *snapshot.Snapshot }

func (f *fakeSource) Snapshot() *snapshot.Snapshot { return f.snap }

func get(t *testing.T, h http.Handler, path string) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	b, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(b)
}

func testConfig(t *testing.T) *Config {
	t.Helper()
	cfg, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestHealthEndpoints(t *testing.T) {
	src := &fakeSource{}
	h := newHandlers(src)
	mux, err := newMux(testConfig(t), registries{rest: prometheus.NewRegistry()}, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/-/healthy", "/-/ready"} {
		if code, _ := get(t, mux, p); code != http.StatusServiceUnavailable {
			t.Errorf("%s before the first snapshot: %d, want 503", p, code)
		}
	}
	src.snap = &snapshot.Snapshot{}
	for _, p := range []string{"/-/healthy", "/-/ready"} {
		if code, _ := get(t, mux, p); code != http.StatusOK {
			t.Errorf("%s after the first snapshot: %d, want 200", p, code)
		}
	}
	h.draining.Store(true)
	if code, _ := get(t, mux, "/-/ready"); code != http.StatusServiceUnavailable {
		t.Errorf("/-/ready while draining: %d, want 503", code)
	}
	if code, _ := get(t, mux, "/-/healthy"); code != http.StatusOK {
		t.Errorf("/-/healthy while draining: %d, want 200", code)
	}
	if code, body := get(t, mux, "/"); code != http.StatusOK || !strings.Contains(body, "/metrics") {
		t.Errorf("landing page: %d, links to /metrics: %v", code, strings.Contains(body, "/metrics"))
	}
	if code, _ := get(t, mux, "/metrics"); code != http.StatusOK {
		t.Errorf("/metrics: %d", code)
	}
}

// The landing page lists the endpoints, the collectors that are on (from
// the configuration) and, once an interval has completed, the accounting
// mode, the meter of each zone and the kernel probes (from the snapshot).
func TestLandingPage(t *testing.T) {
	cfg := testConfig(t)
	cfg.Collector.Enabled[collector.NameProcess], cfg.Collector.Settings.Process().Top = true, 20
	cfg.Collector.LevelOn[ident.KindPod] = false
	src := &fakeSource{}
	mux, err := newMux(cfg, registries{rest: prometheus.NewRegistry()}, newHandlers(src), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, mux, "/")
	if code != http.StatusOK {
		t.Fatalf("landing page: %d", code)
	}
	for _, want := range []string{`href="/metrics"`, `href="/-/healthy"`, `href="/-/ready"`,
		"Collectors: cgroup, gpu, node, probes, process (top 20), container, vm, job, pbs_job, unit</li>",
		"Waiting for the first accounting interval"} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page before the first interval: no %q in\n%s", want, body)
		}
	}
	src.snap = &snapshot.Snapshot{Mode: "bpf", Hierarchy: "v2", Probes: []string{"softirq", "block"}, Counters: []string{"cpu_clock"},
		Zones: []snapshot.Zone{
			{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: "rapl"},
			{ZoneID: reading.ZoneID{Name: "platform", Socket: -1}, Source: "redfish<b>"},
		}}
	_, body = get(t, mux, "/")
	for _, want := range []string{"Accounting: bpf, cgroup hierarchy v2</li>",
		"Meters: package (socket 0): rapl, measured; platform (node): redfish&lt;b&gt;, measured</li>",
		"Kernel probes: softirq, block (perf counters: cpu_clock)</li>"} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page: no %q in\n%s", want, body)
		}
	}
	if strings.Contains(body, "Waiting for") || strings.Contains(body, "pod,") {
		t.Errorf("landing page after the first interval still waits, or lists the pod collector that is off:\n%s", body)
	}
	if code, _ := get(t, mux, "/nope"); code != http.StatusNotFound {
		t.Errorf("/nope: %d, want 404", code)
	}
}

func TestOpenMeterEstimatorOverrides(t *testing.T) {
	cfg := testConfig(t)
	cfg.Path.Procfs = t.TempDir() // no cpuinfo: average coefficients
	cfg.Path.Sysfs = t.TempDir()  // no powercap, no cpu list
	cfg.Power.MinWattsPerCPU, cfg.Power.MaxWattsPerCPU = 1, 4
	cfg.Power.IPMI = "off"
	m, err := openMeter(context.Background(), cfg, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "estimator" || !m.Estimated() {
		t.Errorf("auto without RAPL gave %s (estimated %v), want the estimator", m.Name(), m.Estimated())
	}
	cfg.Power.Source = "rapl"
	if _, err := openMeter(context.Background(), cfg, 0, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "power.source=rapl") {
		t.Errorf("forced RAPL without RAPL: %v, want an error naming power.source=rapl", err)
	}
}

// power.source=auto reads every meter the node has: here a Cray
// pm_counters tree, whose platform zone comes out measured.
func TestOpenMeterDiscovers(t *testing.T) {
	cfg := testConfig(t)
	cfg.Path.Sysfs = "../../pkg/power/testdata/pm-counters"
	cfg.Power.IPMI = "off"
	m, err := openMeter(context.Background(), cfg, 0, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m.Estimated() {
		t.Fatalf("discovered meter %s is estimated", m.Name())
	}
	samples, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	zones := map[string]bool{}
	for _, s := range samples {
		zones[s.Zone] = true
	}
	if !zones["platform"] {
		t.Errorf("zones %v, want platform from pm_counters", zones)
	}
}
