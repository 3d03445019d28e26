package main

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/setting"
)

// DefaultListenAddress is the exporter's port. 9841 is not claimed on the
// Prometheus "default port allocations" wiki page as far as we know; change
// it there and here together if that turns out to be wrong.
const DefaultListenAddress = ":9841"

// webSettings are the HTTP server's settings (web.*).
type webSettings struct {
	ListenAddresses []string
	// AlloyTargets serves /alloy-targets for Grafana Alloy's discovery.http.
	AlloyTargets bool
	// ConfigFile is an exporter-toolkit web configuration (TLS, basic auth).
	ConfigFile    string
	TelemetryPath string
}

// Declare declares web.*, bound to w.
func (w *webSettings) Declare(s *setting.Set) {
	const listen, telemetry = "web.listen-address", "web.telemetry-path"
	s.Strings(&w.ListenAddresses, listen, []string{DefaultListenAddress}, "Addresses to listen on for the web interface and telemetry. Repeatable.").Checked(func() error {
		if len(w.ListenAddresses) == 0 {
			return setting.Invalid(listen, "", "at least one address is required")
		}
		var errs []error
		for _, a := range w.ListenAddresses {
			if err := checkListenAddress(a); err != nil {
				errs = append(errs, setting.Invalid(listen, a, err.Error()+" (want host:port or :port)"))
			}
		}
		return errors.Join(errs...)
	})
	s.String(&w.ConfigFile, "web.config.file", "", "Path to an exporter-toolkit web configuration file that enables TLS or authentication.")
	s.String(&w.TelemetryPath, telemetry, "/metrics", "Path under which to expose metrics.").Checked(func() error {
		if p := w.TelemetryPath; !strings.HasPrefix(p, "/") || p == "/" || strings.HasPrefix(p, "/-/") {
			return setting.Invalid(telemetry, p, "must start with / and not be / or under /-/ (landing page and health endpoints)")
		}
		return nil
	})
	s.Bool(&w.AlloyTargets, "web.alloy-targets", true, "Serve /alloy-targets: the processes that opted in to profiling (collector.perf.env-var), as Grafana Alloy discovery.http targets for pyroscope.ebpf.")
}

// checkListenAddress parses a listen address as net.Listen would take it,
// so that a wrong one stops start-up before anything is loaded.
func checkListenAddress(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return err
	}
	return nil
}

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
// page. The registries are passed in: there is no global registry.
func newMux(cfg *Config, regs registries, h *handlers, log *zap.Logger) (*http.ServeMux, error) {
	reg := regs.rest
	metrics := promhttp.HandlerFor(regs.all(), promhttp.HandlerOpts{
		ErrorLog: zap.NewStdLog(log.Named("promhttp")),
		// One failing collector must not cost the others' series; its
		// failure shows in wattrace_scrape_collector_success.
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})
	mux := http.NewServeMux()
	shared := newSharedMetrics(h.src, regs.all(), metrics, log)
	if regs.exp != nil {
		shared.text, shared.rest = regs.exp, regs.rest
	}
	if a, ok := h.src.(stepAheadSource); ok {
		// Before the loop runs: build registers this before any service
		// starts.
		a.OnStepAhead(shared.prepare)
	}
	mux.Handle(cfg.Web.TelemetryPath, promhttp.InstrumentMetricHandler(reg, shared))
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
	l := &landing{cfg: cfg, src: h.src, base: web.LandingConfig{
		Name:        "wattrace",
		Description: "Energy per process, cgroup and node, from the kernel's own CPU accounting",
		Version:     version.Info(),
		Links:       links,
	}}
	if _, err := l.page(); err != nil {
		return nil, fmt.Errorf("building landing page: %w", err)
	}
	mux.Handle("/", l)
	return mux, nil
}

// landing is exporter-toolkit's landing page with a status section (the
// collectors that are on, the meters behind each zone, the kernel probes),
// rebuilt per request because meters and probes are known only once the
// first interval has completed.
type landing struct {
	cfg  *Config
	src  collector.SnapshotSource
	base web.LandingConfig
}

func (l *landing) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, err := l.page()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	p.ServeHTTP(w, r)
}

func (l *landing) page() (*web.LandingPageHandler, error) {
	c := l.base
	// NewLandingPage rewrites the links in place.
	c.Links = append([]web.LandingLinks(nil), l.base.Links...)
	var b strings.Builder
	if err := statusTmpl.Execute(&b, l.status()); err != nil {
		return nil, err
	}
	c.ExtraHTML = b.String()
	return web.NewLandingPage(c)
}

type pageStatus struct {
	Collectors []string
	Ready      bool
	Mode       string
	Hierarchy  string
	Meters     []string
	Probes     []string
	Counters   []string
}

func (l *landing) status() pageStatus {
	c := l.cfg.Collector
	var st pageStatus
	// The registry's order, then the workload levels: the flags' order.
	for _, r := range collector.Registered() {
		if !r.Flag || !c.Enabled[r.Name] {
			continue
		}
		name := r.Name
		if top := c.Settings.Process().Top; name == collector.NameProcess && top > 0 {
			name = fmt.Sprintf("process (top %d)", top)
		}
		st.Collectors = append(st.Collectors, name)
	}
	for _, l := range c.Levels() {
		st.Collectors = append(st.Collectors, string(l))
	}
	snap := l.src.Snapshot()
	if snap == nil {
		return st
	}
	st.Ready, st.Mode, st.Hierarchy = true, snap.Mode, snap.Hierarchy
	for _, z := range snap.Zones {
		method := "measured"
		if z.Estimated {
			method = "estimated"
		}
		socket := "node"
		if z.Socket >= 0 {
			socket = "socket " + strconv.Itoa(z.Socket)
		}
		st.Meters = append(st.Meters, fmt.Sprintf("%s (%s): %s, %s", z.Name, socket, z.Source, method))
	}
	st.Probes, st.Counters = snap.Probes, snap.Counters
	return st
}

var statusTmpl = template.Must(template.New("status").Parse(`<div id="status">
<h2>Status</h2>
<ul>
<li>Collectors: {{range $i, $c := .Collectors}}{{if $i}}, {{end}}{{$c}}{{end}}</li>
{{- if .Ready}}
<li>Accounting: {{.Mode}}, cgroup hierarchy {{.Hierarchy}}</li>
<li>Meters: {{range $i, $m := .Meters}}{{if $i}}; {{end}}{{$m}}{{end}}</li>
<li>Kernel probes: {{range $i, $p := .Probes}}{{if $i}}, {{end}}{{$p}}{{else}}none{{end}}{{if .Counters}} (perf counters: {{range $i, $c := .Counters}}{{if $i}}, {{end}}{{$c}}{{end}}){{end}}</li>
{{- else}}
<li>Waiting for the first accounting interval: meters and probes show once it has completed.</li>
{{- end}}
</ul>
</div>`))

// webServer serves the mux on every listen address through
// exporter-toolkit (TLS and basic auth from --web.config.file), except that
// /-/healthy and /-/ready answer without credentials: they reveal nothing,
// and a Kubernetes httpGet probe can't send any.
//
// The toolkit puts its auth check in front of server.Handler inside
// web.Serve, just before it starts accepting; the listener's first Accept,
// on that same goroutine, puts the health routes in front of the check.
// One http.Server per address, because web.Serve wraps the server's handler
// each time it is called.
type webServer struct {
	flags   *web.FlagConfig
	log     *slog.Logger
	health  *handlers
	servers []*http.Server
	lns     []net.Listener
}

// listenWeb binds every listen address and nothing else: start-up binds
// first, so a taken port or a bad address stops it at once, naming the key,
// before BPF programs and meters are loaded. route adds the handlers once
// they exist.
func listenWeb(cfg *Config, log *slog.Logger) (*webServer, error) {
	systemd := false
	s := &webServer{log: log, flags: &web.FlagConfig{
		WebListenAddresses: &cfg.Web.ListenAddresses,
		WebSystemdSocket:   &systemd,
		WebConfigFile:      &cfg.Web.ConfigFile,
	}}
	for _, addr := range cfg.Web.ListenAddresses {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("web.listen-address %q: %w", addr, err)
		}
		s.lns = append(s.lns, l)
	}
	return s, nil
}

// route serves mux, with the health endpoints of h in front of the auth
// check, on every bound listener.
func (s *webServer) route(mux http.Handler, h *handlers) {
	s.health = h
	for i, l := range s.lns {
		srv := &http.Server{
			Handler: mux,
			// Guards against clients that open connections and never send.
			ReadHeaderTimeout: 10 * time.Second,
		}
		s.servers = append(s.servers, srv)
		s.lns[i] = &healthFirstListener{Listener: l, server: srv, health: h}
	}
}

// Close closes the listeners (already closed after a shutdown): start-up
// that fails after binding lets the ports go.
func (s *webServer) Close() error {
	s.close()
	return nil
}

func (s *webServer) close() {
	for _, l := range s.lns {
		_ = l.Close()
	}
}

// serve blocks until every server has stopped and returns the first error
// (http.ErrServerClosed after shutdown).
func (s *webServer) serve() error {
	errs := make(chan error, len(s.servers))
	for i := range s.servers {
		go func(l net.Listener, srv *http.Server) { errs <- web.Serve(l, srv, s.flags, s.log) }(s.lns[i], s.servers[i])
	}
	var first error
	for range s.servers {
		if err := <-errs; first == nil {
			first = err
		}
	}
	return first
}

func (s *webServer) shutdown(ctx context.Context) error {
	var first error
	for _, srv := range s.servers {
		if err := srv.Shutdown(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

type healthFirstListener struct {
	net.Listener
	once   sync.Once
	server *http.Server
	health *handlers
}

func (l *healthFirstListener) Accept() (net.Conn, error) {
	l.once.Do(func() {
		next := l.server.Handler
		l.server.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/-/healthy":
				l.health.healthy(w, r)
			case "/-/ready":
				l.health.ready(w, r)
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	return l.Listener.Accept()
}
