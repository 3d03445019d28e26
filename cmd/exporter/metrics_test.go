package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
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
