package main

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/collector"
	"github.com/wattrace/wattrace/pkg/config"
)

// handlers serves the health endpoints.
//
// /-/healthy answers 200 once the first accounting interval has completed
// and 503 before: until then every energy series is missing, and a
// liveness or startup probe should wait rather than route scrapes here.
// /-/ready answers the same, and 503 again once shutdown has begun.
type handlers struct {
	src      collector.SnapshotSource
	draining atomic.Bool
	// alloy serves /alloy-targets when set.
	alloy http.Handler
}

func newHandlers(src collector.SnapshotSource) *handlers {
	return &handlers{src: src}
}

func (h *handlers) healthy(w http.ResponseWriter, _ *http.Request) {
	if h.src.Snapshot() == nil {
		http.Error(w, "no accounting interval completed yet", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "wattrace is healthy.")
}

func (h *handlers) ready(w http.ResponseWriter, r *http.Request) {
	if h.draining.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if h.src.Snapshot() == nil {
		http.Error(w, "no accounting interval completed yet", http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "wattrace is ready.")
}

// newMux routes the telemetry path, the health endpoints and the landing
// page. reg is passed in: there is no global registry.
func newMux(cfg *config.Config, reg *prometheus.Registry, h *handlers, log *zap.Logger) (*http.ServeMux, error) {
	metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(log.Named("promhttp")),
		// One failing collector must not cost the others' series; its
		// failure shows in wattrace_scrape_collector_success.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})
	mux := http.NewServeMux()
	mux.Handle(cfg.Web.TelemetryPath, promhttp.InstrumentMetricHandler(reg, metrics))
	mux.HandleFunc("/-/healthy", h.healthy)
	mux.HandleFunc("/-/ready", h.ready)
	links := []web.LandingLinks{
		{Address: cfg.Web.TelemetryPath, Text: "Metrics"},
		{Address: "/-/healthy", Text: "Health", Description: "200 once the first accounting interval has completed"},
		{Address: "/-/ready", Text: "Readiness"},
	}
	if h.alloy != nil {
		mux.Handle("/alloy-targets", h.alloy)
		links = append(links, web.LandingLinks{Address: "/alloy-targets", Text: "Alloy targets",
			Description: "processes that opted in to profiling, for discovery.http"})
	}
	landing, err := web.NewLandingPage(web.LandingConfig{
		Name:        "wattrace",
		Description: "Energy per process, cgroup and node, from the kernel's own CPU accounting",
		Version:     version.Info(),
		Links:       links,
	})
	if err != nil {
		return nil, fmt.Errorf("building landing page: %w", err)
	}
	mux.Handle("/", landing)
	return mux, nil
}
