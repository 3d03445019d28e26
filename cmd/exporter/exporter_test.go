package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/collector"
	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/workload"
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

func testConfig(t *testing.T) *config.Config {
	t.Helper()
	cfg, err := config.Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func TestHealthEndpoints(t *testing.T) {
	src := &fakeSource{}
	h := newHandlers(src)
	mux, err := newMux(testConfig(t), prometheus.NewRegistry(), h, zap.NewNop())
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
	cfg.Collector.Enabled[collector.NameProcess], cfg.Collector.ProcessTop = true, 20
	cfg.Collector.LevelOn[workload.KindPod] = false
	src := &fakeSource{}
	mux, err := newMux(cfg, prometheus.NewRegistry(), newHandlers(src), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	code, body := get(t, mux, "/")
	if code != http.StatusOK {
		t.Fatalf("landing page: %d", code)
	}
	for _, want := range []string{`href="/metrics"`, `href="/-/healthy"`, `href="/-/ready"`,
		"Collectors: cgroup, gpu, node, probes, process (top 20), container, vm, job, unit</li>",
		"Waiting for the first accounting interval"} {
		if !strings.Contains(body, want) {
			t.Errorf("landing page before the first interval: no %q in\n%s", want, body)
		}
	}
	src.snap = &snapshot.Snapshot{Mode: "bpf", Hierarchy: "v2", Probes: []string{"softirq", "block"}, Counters: []string{"cpu_clock"},
		Zones: []snapshot.Zone{
			{ZoneID: snapshot.ZoneID{Name: "package", Socket: 0}, Source: "rapl"},
			{ZoneID: snapshot.ZoneID{Name: "platform", Socket: -1}, Source: "redfish<b>"},
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

func TestLoggerJSON(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.Log{Level: "warn", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("dropped")
	log.Warn("kept", zap.Int("n", 3))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 1 {
		t.Fatalf("got %d lines, want 1 (info filtered at warn): %q", len(lines), buf.String())
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["msg"] != "kept" || rec["level"] != "warn" || rec["n"] != 3.0 {
		t.Errorf("record %v", rec)
	}
}

func TestLoggerBadValues(t *testing.T) {
	if _, err := newLogger(config.Log{Level: "loud", Format: "json"}, io.Discard); err == nil {
		t.Error("bad level accepted")
	}
	if _, err := newLogger(config.Log{Level: "info", Format: "xml"}, io.Discard); err == nil {
		t.Error("bad format accepted")
	}
}

// exporter-toolkit logs through slog; zap's bridge must keep level
// filtering, the logger's name, attributes, groups and errors.
func TestSlogBridge(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.Log{Level: "info", Format: "json"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	sl := newSlogLogger(log, "web")
	sl.Debug("hidden")
	sl.With("address", ":9841").WithGroup("tls").Error("listen failed", "err", errors.New("boom"), "port", 9841)
	var rec map[string]any
	if err := json.Unmarshal(bytes.TrimSpace(buf.Bytes()), &rec); err != nil {
		t.Fatalf("want exactly one JSON record, got %q: %v", buf.String(), err)
	}
	want := map[string]any{"level": "error", "logger": "web", "msg": "listen failed", "address": ":9841"}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (record %v)", k, rec[k], v, rec)
		}
	}
	if tls, _ := rec["tls"].(map[string]any); tls["err"] != "boom" || tls["port"] != 9841.0 {
		t.Errorf("group tls = %v, want err=boom port=9841 (record %v)", rec["tls"], rec)
	}
}

// --log.format=logfmt writes logfmt in node_exporter's shape: ts (UTC,
// milliseconds), level, caller, msg, then the fields; values with spaces
// or quotes are quoted; slog records from exporter-toolkit look the same.
func TestLoggerLogfmt(t *testing.T) {
	var buf bytes.Buffer
	log, err := newLogger(config.Log{Level: "info", Format: "logfmt"}, &buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Debug("hidden")
	log.Info("meter opened", zap.String("meter", "rapl"), zap.Int("zones", 2), zap.String("path", "/sys/class/powercap"),
		zap.String("note", `has "quotes" and spaces`), zap.Duration("interval", 1500*time.Millisecond))
	log.Named("promhttp").Warn("scrape failed", zap.Error(errors.New("boom")))
	newSlogLogger(log, "web").WithGroup("tls").Info("Listening on", "address", "[::]:9841")
	lines := strings.Split(strings.TrimRight(buf.String(), "\n"), "\n")
	ts := `ts=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z `
	want := []string{
		`^` + ts + `level=info caller=exporter/exporter_test\.go:\d+ msg="meter opened" meter=rapl zones=2 path=/sys/class/powercap note="has \\"quotes\\" and spaces" interval=1\.5s$`,
		`^` + ts + `level=warn caller=exporter/exporter_test\.go:\d+ msg="scrape failed" logger=promhttp error=boom$`,
		`^` + ts + `level=info caller=exporter/exporter_test\.go:\d+ msg="Listening on" logger=web tls\.address=\[::\]:9841$`,
	}
	if len(lines) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), buf.String())
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[i], w)
		}
	}
}

func TestOpenMeterEstimatorOverrides(t *testing.T) {
	cfg := testConfig(t)
	cfg.Path.Procfs = t.TempDir() // no cpuinfo: average coefficients
	cfg.Path.Sysfs = t.TempDir()  // no powercap, no cpu list
	cfg.Power.Estimator = config.Estimator{MinWattsPerCPU: 1, MaxWattsPerCPU: 4}
	cfg.Power.IPMI = "off"
	m, err := openMeter(context.Background(), cfg, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "estimator" || !m.Estimated() {
		t.Errorf("auto without RAPL gave %s (estimated %v), want the estimator", m.Name(), m.Estimated())
	}
	cfg.Power.Source = "rapl"
	if _, err := openMeter(context.Background(), cfg, nil, zap.NewNop()); err == nil || !strings.Contains(err.Error(), "power.source=rapl") {
		t.Errorf("forced RAPL without RAPL: %v, want an error naming power.source=rapl", err)
	}
}

// power.source=auto reads every meter the node has: here a Cray
// pm_counters tree, whose platform zone comes out measured.
func TestOpenMeterDiscovers(t *testing.T) {
	cfg := testConfig(t)
	cfg.Path.Sysfs = "../../pkg/power/testdata/pm-counters"
	cfg.Power.IPMI = "off"
	m, err := openMeter(context.Background(), cfg, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if m.Estimated() {
		t.Fatalf("discovered meter %s is estimated", m.Name())
	}
	samples, err := m.Read()
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
