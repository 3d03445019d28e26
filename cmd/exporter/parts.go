package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/cgroupstats"
	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/workload"
)

// part is one part of the exporter and its opener, in the manner of
// Kepler's services: open reads the configuration and what the parts
// before it opened (st), adds what it opens to st, and registers with c
// what must be closed or run.
type part struct {
	name string
	open func(cfg *Config, st *state, c *components) error
}

// parts lists every part in the order build opens them; a part reads only
// what parts above it opened. Adding a part is one opener and one line
// here.
var parts = []part{
	{"web listeners", openListeners},
	{"cgroup hierarchy", openHierarchy},
	{"node", readNode},
	{"accounting", openAccountingPart},
	{"GPUs and meters", openSourcesPart},
	{"workloads", openWorkloadsPart},
	{"profiler", openProfiler},
	{"cgroup names", openCgroupNames},
	{"probes", openProbesPart},
	{"BPF statistics", openBPFStats},
	{"emissions", openEmissionsPart},
	{"stats loop", openLoop},
	{"guest shares", openGuestShares},
	{"collectors", openCollectors},
	{"HTTP", openHTTP},
}

// state is what the parts opened so far.
type state struct {
	web     *webServer
	mounts  cgroup.Mounts // read once: the hierarchy and the resource counters' layout come from them
	hier    cgroup.Hierarchy
	res     *cgroup.Resolver
	cpus    int         // online CPUs, read once
	sockets map[int]int // CPU → socket; nil: one socket
	acc     accounting
	meter   power.Meter
	ids     *workload.Resolver // names workloads; nil when nothing needs it
	// stats are the loop's optional stages' options, added by their parts.
	stats []stats.Option
	// programs are every BPF loader's program statistics (bpf-stats).
	programs []collector.ProgramStatsSource
	// collectorOn says which Flag collectors run: the configuration's
	// collector.<name>, turned off by the part a collector depends on
	// when that part cannot run (probes, BPF statistics without BPF).
	collectorOn map[string]bool
	loop        *stats.Loop
	reg         registries
}

// build opens every part of parts in order. What needs closing is
// registered with c as it is opened.
func build(cfg *Config, c *components) error {
	return openParts(cfg, &state{}, c, parts)
}

func openParts(cfg *Config, st *state, c *components, ps []part) error {
	for _, p := range ps {
		if err := p.open(cfg, st, c); err != nil {
			return err
		}
	}
	return nil
}

// openListeners binds the listeners before anything heavy loads, so a
// taken port fails at once; a bad web config fails here, not on the first
// TLS handshake.
func openListeners(cfg *Config, st *state, c *components) error {
	if cfg.Web.ConfigFile != "" {
		if err := web.Validate(cfg.Web.ConfigFile); err != nil {
			return fmt.Errorf("web.config.file %s: %w", cfg.Web.ConfigFile, err)
		}
	}
	s, err := listenWeb(cfg, cli.SlogLogger(c.log, "web"))
	if err != nil {
		return err
	}
	c.closeLater("listeners", s)
	st.web = s
	return nil
}

func openHierarchy(cfg *Config, st *state, c *components) error {
	mounts, err := cgroup.ReadMounts(cfg.Path.Procfs, cfg.Path.Cgroupfs)
	var hier cgroup.Hierarchy
	if err == nil {
		hier, err = mounts.Hierarchy(cfg.Cgroup.Hierarchy)
	}
	if err != nil {
		return fmt.Errorf("detecting cgroup hierarchy (cgroup.hierarchy=%s): %w", cfg.Cgroup.Hierarchy, err)
	}
	c.log.Info("cgroup hierarchy", zap.String("hierarchy", string(hier.Kind)), zap.String("mount", hier.Mount))
	st.mounts, st.hier, st.res = mounts, hier, cgroup.NewResolver(hier)
	return nil
}

// readNode reads the CPU count and topology once: the ledger's
// plausibility check, procfs, cgroupfs, the estimator and the per-socket
// split all use them.
func readNode(cfg *Config, st *state, c *components) error {
	st.cpus = power.CPUCount(cfg.Path.Sysfs, c.log)
	sockets, err := power.CPUSockets(cfg.Path.Sysfs)
	if err != nil {
		// Without the topology all usage lands on one socket: per-socket
		// splits are then wrong, node totals still right.
		c.log.Warn("CPU topology unavailable; treating the node as one socket", zap.Error(err))
		sockets = nil
	}
	st.sockets = sockets
	st.collectorOn = map[string]bool{}
	for name, on := range cfg.Collector.Enabled {
		st.collectorOn[name] = on
	}
	return nil
}

func openAccountingPart(cfg *Config, st *state, c *components) error {
	// Before the BPF objects load (start-up's peak of heap: the kernel's
	// BTF, decoded): the init code run so far is not needed again, and the
	// peak RSS (VmHWM) is then that heap plus what loading touches, not
	// plus the whole binary.
	if n, err := releaseBinaryPages(); err != nil {
		c.log.Debug("start-up code left resident", zap.Int("released_bytes", n), zap.Error(err))
	}
	acc, err := openAccounting(cfg, st.hier, st.res, st.cpus, c.log)
	if err != nil {
		return err
	}
	// Closing the BPF source detaches its programs.
	c.closeLater("accounting source", acc.src)
	st.acc = acc
	if acc.bpfMode() {
		st.programs = append(st.programs, acc.bpf)
	}
	return nil
}

// openSourcesPart opens the GPU sources and the meters through the
// composition `wattrace measure` shares (internal/compose): the meters leave
// out the GPU zones of the devices the GPU stage reads itself.
func openSourcesPart(cfg *Config, st *state, c *components) error {
	n, err := openSources(c.ctx, cfg, st.cpus, c.log)
	if err != nil {
		return err
	}
	// Closes the GPU sources, logs out of Redfish, closes /dev/ipmi0 and
	// perf descriptors.
	c.closeLater("GPU sources and meters", n)
	if g := gpuStage(cfg, n, c.log.Named("gpu")); g != nil {
		st.stats = append(st.stats, g)
	}
	st.meter = n.Meter
	return nil
}

// openWorkloadsPart opens workload naming (for the workload levels and
// the Alloy targets) and, with a level on, the roll-up and the cgroup
// resource counters.
func openWorkloadsPart(cfg *Config, st *state, c *components) error {
	levels := cfg.Collector.Levels()
	if len(levels) == 0 && !cfg.Web.AlloyTargets {
		return nil
	}
	ids, err := openWorkloads(cfg, st.hier, c)
	if err != nil {
		return err
	}
	st.ids = ids
	if len(levels) == 0 {
		return nil
	}
	st.stats = append(st.stats, stats.WithWorkloads(ids, levels))
	groups := cfg.Resources.Groups()
	if groups == 0 {
		return nil
	}
	layout, err := cgroupstats.LayoutOf(st.mounts)
	if err != nil {
		// Energy and CPU per workload still work; only the cgroupfs
		// resource counters are missing.
		c.log.Warn("cgroup resource counters unavailable", zap.Error(err))
		return nil
	}
	r := cgroupstats.NewReaderWith(layout, cgroupstats.Options{
		SysfsRoot: cfg.Path.Sysfs, CPUs: st.cpus, Log: c.log.Named("cgroupfs")})
	r.Only(groups)
	st.stats = append(st.stats, stats.WithResources(r, cfg.Resources.StaleScrapes))
	return nil
}

func openProfiler(cfg *Config, st *state, c *components) error {
	if !cfg.Collector.Enabled[collector.NamePerf] {
		return nil
	}
	pc := cfg.Perf
	pc.ProcfsRoot, pc.Log = cfg.Path.Procfs, c.log.Named("perf")
	prof, err := profiling.New(pc)
	if err != nil {
		return fmt.Errorf("collector.perf: %w", err)
	}
	c.closeLater("profiler", prof)
	st.stats = append(st.stats, stats.WithProfiler(prof))
	return nil
}

// openCgroupNames keeps the paths of cgroups created and removed between
// two reads (BPF mode).
func openCgroupNames(_ *Config, st *state, c *components) error {
	if !st.acc.bpfMode() {
		return nil
	}
	names, err := bpfloader.LoadCgroupNames(bpfloader.Options{Hierarchy: st.hier, Log: c.log.Named("bpf")})
	if err != nil {
		c.log.Warn("cgroup names from cgroup_mkdir unavailable; cgroups removed between two reads are exported as id:N", zap.Error(err))
		return nil
	}
	c.closeLater("cgroup names", names)
	st.stats = append(st.stats, stats.WithCgroupNames(names))
	st.programs = append(st.programs, names)
	return nil
}

// openProbesPart loads the kernel probes; they need BPF mode, and the
// probes collector runs only when they do.
func openProbesPart(cfg *Config, st *state, c *components) error {
	if !st.bpfCollector(collector.NameProbes, c.log) {
		return nil
	}
	pr, err := openProbes(cfg, st.hier, st.acc.bpf, c.log)
	if err != nil {
		return err
	}
	c.closeLater("probes", pr)
	st.stats = append(st.stats, stats.WithProbes(pr))
	st.programs = append(st.programs, pr)
	return nil
}

// bpfCollector reports whether collector name, which needs BPF mode, is
// on and can run; without BPF it is turned off, with a warning.
func (st *state) bpfCollector(name string, log *zap.Logger) bool {
	if !st.collectorOn[name] {
		return false
	}
	if !st.acc.bpfMode() {
		log.Warn("collector."+name+" needs BPF accounting; disabled", zap.String("accounting_mode", st.acc.src.Mode()))
		st.collectorOn[name] = false
		return false
	}
	return true
}

// openBPFStats turns on the kernel's program statistics for the bpf-stats
// collector, which needs BPF mode.
func openBPFStats(_ *Config, st *state, c *components) error {
	if !st.bpfCollector(collector.NameBPFStats, c.log) {
		return nil
	}
	closer, err := bpfloader.EnableStats()
	if err != nil {
		return fmt.Errorf("collector.bpf-stats: %w", err)
	}
	c.closeLater("BPF statistics", closer)
	return nil
}

func openEmissionsPart(cfg *Config, st *state, c *components) error {
	opts, err := emissionsPart(cfg, c)
	if err != nil {
		return err
	}
	st.stats = append(st.stats, opts...)
	return nil
}

func openLoop(cfg *Config, st *state, c *components) error {
	sc := cfg.Stats
	sc.Sockets, sc.CPUs, sc.Hierarchy = st.sockets, st.cpus, string(st.hier.Kind)
	// Ended processes only matter to the process families, which show the
	// top N by energy.
	sc.EndedProcesses = endedProcesses(cfg)
	loop, err := stats.New(sc, st.acc.src, st.meter, st.res, c.log.Named("stats"), st.stats...)
	if err != nil {
		return fmt.Errorf("starting stats loop: %w", err)
	}
	c.service("stats loop", loop.Run)
	st.loop = loop
	return nil
}

func openGuestShares(cfg *Config, st *state, c *components) error {
	return guestShares(cfg, st.loop, c)
}

// openCollectors builds the collectors and registers them with the Go and
// process collectors.
func openCollectors(cfg *Config, st *state, c *components) error {
	// Whether the meter reports health is its type's ability, not what its
	// Health says at start-up: every meter's health has an entry per
	// source from the first read on.
	_, reportsHealth := st.meter.(power.HealthReporter)
	exp, err := collector.New(st.loop, collector.Options{
		Enabled:        st.collectorOn,
		Settings:       cfg.Collector.Settings,
		Programs:       st.programs,
		Levels:         cfg.Collector.Levels(),
		MeterHealth:    reportsHealth || st.loop.HasGPUs(),
		IdleAttributed: cfg.Stats.IdlePolicy != "none",
		Emissions:      cfg.Emissions.Enabled,
		Log:            c.log.Named("collector"),
	})
	if err != nil {
		return fmt.Errorf("building collectors: %w", err)
	}
	own := prometheus.NewRegistry()
	if err := own.Register(exp); err != nil {
		return fmt.Errorf("registering collectors: %w", err)
	}
	rest := prometheus.NewRegistry()
	rest.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	st.reg = registries{exp: exp, own: own, rest: rest}
	return nil
}

// registries are what the telemetry path serves: the exporter, in a
// registry of its own so that the text format can be rendered by its own
// text path (sharedMetrics.renderText), and the rest (the Go runtime, the
// process, the handler's own counters).
type registries struct {
	exp  *collector.Exporter
	own  prometheus.Gatherer
	rest *prometheus.Registry
}

// all gathers every family, as one registry would.
func (r registries) all() prometheus.Gatherer {
	if r.own == nil {
		return r.rest
	}
	return prometheus.Gatherers{r.own, r.rest}
}

// openHTTP adds the HTTP server: /metrics, the health endpoints and the
// Alloy targets. On shutdown it stops reporting ready first, so that
// nothing new is routed here, then lets in-flight scrapes finish.
func openHTTP(cfg *Config, st *state, c *components) error {
	h := newHandlers(st.loop)
	if cfg.Web.AlloyTargets {
		var err error
		if h.alloy, err = alloyTargets(cfg, st.loop, st.ids, c.log); err != nil {
			return err
		}
	}
	mux, err := newMux(cfg, st.reg, h, c.log)
	if err != nil {
		return err
	}
	st.web.route(mux, h)
	c.actor(func() error {
		err := st.web.serve()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving HTTP: %w", err)
	}, func(error) {
		h.draining.Store(true)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := st.web.shutdown(sctx); err != nil {
			c.log.Warn("HTTP shutdown", zap.Error(err))
		}
	})
	return nil
}
