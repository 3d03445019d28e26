package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

type snapSource struct {
	s atomic.Pointer[snapshot.Snapshot]
}

func (f *snapSource) Snapshot() *snapshot.Snapshot { return f.s.Load() }

// countingCollector counts how often the registry asks it for metrics.
type countingCollector struct {
	desc  *prometheus.Desc
	calls atomic.Int64
}

func (c *countingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c *countingCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.calls.Add(1)
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n))
}

// Scrapes of one snapshot, 8 at once and then more, share one rendering;
// a new snapshot renders again; gzip and plain bodies hold the same text.
func TestSharedMetricsOneRenderingPerSnapshot(t *testing.T) {
	src := &snapSource{}
	c := &countingCollector{desc: prometheus.NewDesc("test_renders", "Renders.", nil, nil)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	fallback := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no snapshot", http.StatusServiceUnavailable)
	})
	h := newSharedMetrics(src, reg, fallback, zap.NewNop())
	get := func(gz bool) (int, string) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		if gz {
			req.Header.Set("Accept-Encoding", "gzip")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		body := rec.Body.String()
		if rec.Header().Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(rec.Body)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(zr)
			body = string(b)
		}
		return rec.Code, body
	}
	if code, _ := get(false); code != http.StatusServiceUnavailable || c.calls.Load() != 0 {
		t.Fatalf("before a snapshot: code %d, %d renders", code, c.calls.Load())
	}
	src.s.Store(&snapshot.Snapshot{})
	var wg sync.WaitGroup
	bodies := make([]string, 8)
	for i := range bodies {
		wg.Add(1)
		go func() { defer wg.Done(); _, bodies[i] = get(i%2 == 0) }()
	}
	wg.Wait()
	for i := 0; i < 4; i++ {
		get(false)
	}
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("12 scrapes of one snapshot gathered %d times, want 1", n)
	}
	for _, b := range bodies {
		if !strings.Contains(b, "test_renders 1\n") {
			t.Fatalf("body %q, want test_renders 1", b)
		}
	}
	src.s.Store(&snapshot.Snapshot{})
	if _, b := get(true); !strings.Contains(b, "test_renders 2\n") || c.calls.Load() != 2 {
		t.Errorf("new snapshot: %q after %d renders, want a second rendering", b, c.calls.Load())
	}
}

func TestAcceptsGzip(t *testing.T) {
	for h, want := range map[string]bool{"": false, "gzip": true, "identity, gzip;q=0.5": true, "gzip;q=0": false, "deflate": false} {
		if got := acceptsGzip(h); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", h, got, want)
		}
	}
}

// A snapshot stepped ahead of the next scrape is rendered then, in the
// format and encoding the last scrape asked for: the scrape gathers
// nothing and is served those bytes.
func TestSharedMetricsPrepare(t *testing.T) {
	src := &snapSource{}
	c := &countingCollector{desc: prometheus.NewDesc("test_renders", "Renders.", nil, nil)}
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	h := newSharedMetrics(src, reg, http.NotFoundHandler(), zap.NewNop())
	get := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	h.prepare(&snapshot.Snapshot{}) // no scrape yet: nothing to go by
	if n := c.calls.Load(); n != 0 {
		t.Fatalf("prepared before any scrape: %d renders", n)
	}
	src.s.Store(&snapshot.Snapshot{})
	get()
	next := &snapshot.Snapshot{}
	src.s.Store(next)
	h.prepare(next)
	if n := c.calls.Load(); n != 2 {
		t.Fatalf("%d renders after one scrape and one prepare, want 2", n)
	}
	h.mu.Lock()
	rd := h.by[h.last.format]
	h.mu.Unlock()
	if rd == nil || rd.gz == nil {
		t.Fatal("the prepared rendering has no gzip body, though the last scrape asked for gzip")
	}
	rec := get()
	if n := c.calls.Load(); n != 2 || rec.Header().Get("Content-Encoding") != "gzip" {
		t.Errorf("the scrape after prepare gathered again (%d renders) or lost gzip (%q)", n, rec.Header().Get("Content-Encoding"))
	}
}

// fixedGauge is a family of one series with a fixed value.
type fixedGauge struct{ desc *prometheus.Desc }

func (c fixedGauge) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }
func (c fixedGauge) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, 7)
}

// The text format served through the exporter's own text path is what
// the registries' Gather and the text encoder give, the rest's families
// merged in name order (before, between and after the exporter's); other
// formats still go through Gather.
func TestSharedMetricsTextPath(t *testing.T) {
	src := &snapSource{}
	snap := &snapshot.Snapshot{Time: time.Unix(1700000000, 0), Mode: "bpf", Hierarchy: "v2", Intervals: 3,
		Zones: []snapshot.Zone{{ZoneID: reading.ZoneID{Name: "package", Socket: 0}, Source: "rapl", EnergyJ: 10, IdleJ: 4, DynamicJ: 6, PowerW: 2}},
		Cgroups: []*snapshot.Consumer{{Cgroup: `/a"b\c`, CgroupID: 5, CPUSeconds: 1.5, Alive: true,
			Energy: snapshot.Energy{{Zone: "package", Source: "rapl", ZoneJoules: snapshot.ZoneJoules{DynamicJ: 6}}}}},
	}
	src.s.Store(snap)
	exp, err := collector.New(src, collector.Options{Enabled: map[string]bool{collector.NameNode: true, collector.NameCgroup: true}})
	if err != nil {
		t.Fatal(err)
	}
	own, rest := prometheus.NewRegistry(), prometheus.NewRegistry()
	own.MustRegister(exp)
	for _, name := range []string{"aaa_first", "wattrace_m_between", "zzz_last"} {
		rest.MustRegister(fixedGauge{prometheus.NewDesc(name, "Fixed.", nil, nil)})
	}
	regs := registries{exp: exp, own: own, rest: rest}
	viaGather := newSharedMetrics(src, regs.all(), http.NotFoundHandler(), zap.NewNop())
	viaText := newSharedMetrics(src, regs.all(), http.NotFoundHandler(), zap.NewNop())
	viaText.text, viaText.rest = exp, rest
	get := func(h http.Handler, accept string) (string, string) {
		req := httptest.NewRequest("GET", "/metrics", nil)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Header().Get("Content-Type"), rec.Body.String()
	}
	durations := regexp.MustCompile(`(?m)^(wattrace_scrape_collector_duration_seconds\{[^}]*\}) .*$`)
	for _, accept := range []string{"", "text/plain;version=0.0.4", "text/plain;version=1.0.0;escaping=underscores"} {
		wantType, want := get(viaGather, accept)
		gotType, got := get(viaText, accept)
		want, got = durations.ReplaceAllString(want, "$1 D"), durations.ReplaceAllString(got, "$1 D")
		if got != want || gotType != wantType {
			t.Errorf("Accept %q: the text path served %s\n%s\nGather %s\n%s", accept, gotType, got, wantType, want)
		}
		first, between, last := strings.Index(got, "aaa_first 7"), strings.Index(got, "wattrace_m_between 7"), strings.Index(got, "zzz_last 7")
		node := strings.Index(got, "wattrace_node_energy_joules_total{")
		if first < 0 || !(first < strings.Index(got, "wattrace_cgroup_") && between > strings.Index(got, "wattrace_cgroup_") && between < node && node < last) {
			t.Errorf("Accept %q: families out of order:\n%s", accept, got)
		}
	}
	// Protobuf comes from Gather, the same figures.
	ct, body := get(viaText, "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited")
	if !strings.Contains(ct, "protobuf") || !strings.Contains(body, "wattrace_m_between") || !strings.Contains(body, `/a"b\c`) {
		t.Errorf("protobuf: %s, %d bytes", ct, len(body))
	}
}
