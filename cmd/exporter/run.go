package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/bpfloader"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/cgroupstats"
	"github.com/wattrace/wattrace/pkg/collector"
	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/profiling"
	"github.com/wattrace/wattrace/pkg/stats"
	"github.com/wattrace/wattrace/pkg/workload"
)

// shutdownTimeout bounds how long in-flight scrapes may take once a signal
// arrives; Kubernetes' default grace period is 30s.
const shutdownTimeout = 10 * time.Second

// run builds the exporter's components, runs them until ctx is done or
// one fails, and closes them (BPF programs are detached) before returning.
func run(ctx context.Context, cfg *config.Config, log *zap.Logger) error {
	log.Info("starting wattrace", zap.String("version", version.Info()), zap.String("build_context", version.BuildContext()))
	c := newComponents(log)
	defer c.close()
	if err := buildTight(cfg, c); err != nil {
		return err
	}
	if n, err := releaseBinaryPages(); err != nil {
		log.Debug("start-up code left resident", zap.Int("released_bytes", n), zap.Error(err))
	}
	return c.run(ctx)
}

// build opens every part in dependency order: the sources, the stats loop
// that reads them, the collectors that read its snapshots, and the HTTP
// server. What needs closing is registered with c as it is opened.
func build(cfg *config.Config, c *components) error {
	log := c.log
	if cfg.Web.ConfigFile != "" {
		// Fail at start-up, not on the first TLS handshake.
		if err := web.Validate(cfg.Web.ConfigFile); err != nil {
			return fmt.Errorf("web.config.file %s: %w", cfg.Web.ConfigFile, err)
		}
	}
	// Bound before anything heavy loads: a taken port fails at once.
	webSrv, err := listenWeb(cfg, newSlogLogger(log, "web"))
	if err != nil {
		return err
	}
	c.closeLater("listeners", webSrv)
	hier, err := cgroup.Detect(cfg.Path.Procfs, cfg.Path.Cgroupfs, cfg.Cgroup.Hierarchy)
	if err != nil {
		return fmt.Errorf("detecting cgroup hierarchy (cgroup.hierarchy=%s): %w", cfg.Cgroup.Hierarchy, err)
	}
	log.Info("cgroup hierarchy", zap.String("hierarchy", string(hier.Kind)), zap.String("mount", hier.Mount))
	res := cgroup.NewResolver(hier)

	// Before the BPF objects load (start-up's peak of heap: the kernel's
	// BTF, decoded): the init code run so far is not needed again, and the
	// peak RSS (VmHWM) is then that heap plus what loading touches, not
	// plus the whole binary.
	if n, err := releaseBinaryPages(); err != nil {
		log.Debug("start-up code left resident", zap.Int("released_bytes", n), zap.Error(err))
	}
	acc, err := openAccounting(cfg, hier, res, log)
	if err != nil {
		return err
	}
	// Closing the BPF source detaches its programs.
	c.closeLater("accounting source", acc.src)

	// The GPUs first: the meters leave out the GPU zones of the devices
	// the GPU stage reads itself.
	gpus, gpuDevs, err := openGPUs(cfg, c)
	if err != nil {
		return err
	}
	meter, err := openMeter(c.ctx, cfg, gpuDevs, log)
	if err != nil {
		return err
	}
	if cl, ok := meter.(io.Closer); ok {
		// Logs out of Redfish, closes /dev/ipmi0 and perf descriptors.
		c.closeLater("meter", cl)
	}

	opts, programs, err := loopParts(cfg, hier, acc, c)
	if err != nil {
		return err
	}
	if gpus != nil {
		opts.stats = append(opts.stats, gpus)
	}
	emis, err := emissionsPart(cfg, c)
	if err != nil {
		return err
	}
	opts.stats = append(opts.stats, emis...)
	sockets, err := power.CPUSockets(cfg.Path.Sysfs)
	if err != nil {
		// Without the topology all usage lands on one socket: per-socket
		// splits are then wrong, node totals still right.
		log.Warn("CPU topology unavailable; treating the node as one socket", zap.Error(err))
		sockets = nil
	}
	loop, err := stats.New(stats.Config{
		Interval:    cfg.Stats.Interval,
		Retention:   cfg.Stats.Retention,
		IdlePolicy:  cfg.Power.IdlePolicy,
		IdleWatts:   cfg.Power.IdleWatts,
		Sockets:     sockets,
		CPUs:        onlineCPUs(cfg.Path.Sysfs, log),
		Hierarchy:   string(hier.Kind),
		UsageMetric: cfg.Power.UsageMetric,
		OnDemand:    cfg.Stats.OnDemand,
		MaxGap:      cfg.Stats.MaxGap,
		// Ended processes only matter to the process families, which
		// show the top N by energy.
		EndedProcesses: endedProcesses(cfg),
	}, acc.src, meter, res, log.Named("stats"), opts.stats...)
	if err != nil {
		return fmt.Errorf("starting stats loop: %w", err)
	}
	c.service("stats loop", loop.Run)
	if err := guestShares(cfg, loop, c); err != nil {
		return err
	}

	reg, err := registry(cfg, loop, meter, acc, opts.probes, programs, c)
	if err != nil {
		return err
	}
	return serveHTTP(cfg, reg, loop, opts.ids, webSrv, c)
}

// parts are the stats loop's optional parts and the resolver that names
// workloads (nil when no level is exported and Alloy targets are off).
type parts struct {
	stats []stats.Option
	ids   *workload.Resolver
	// probes is true when the kernel probes run (BPF mode only).
	probes bool
}

// loopParts opens the loop's optional parts: workload resolution and
// cgroup resources, the perf profiler and, in BPF mode, the kernel probes.
// It returns the BPF programs' statistics sources, every loader's.
func loopParts(cfg *config.Config, hier cgroup.Hierarchy, acc accounting, c *components) (parts, []collector.ProgramStatsSource, error) {
	var p parts
	var programs []collector.ProgramStatsSource
	log := c.log
	levels := cfg.Collector.Levels()
	if len(levels) > 0 || cfg.Web.AlloyTargets {
		ids, err := openWorkloads(cfg, hier, c)
		if err != nil {
			return p, nil, err
		}
		p.ids = ids
	}
	if len(levels) > 0 {
		p.stats = append(p.stats, stats.WithWorkloads(p.ids, levels))
		var groups cgroupstats.Group
		for _, g := range cfg.Collector.Resources {
			groups |= cgroupstats.GroupNames[g]
		}
		layout, err := cgroupstats.DetectLayout(cfg.Path.Procfs, cfg.Path.Cgroupfs)
		switch {
		case groups == 0:
		case err != nil:
			// Energy and CPU per workload still work; only the
			// cgroupfs resource counters are missing.
			log.Warn("cgroup resource counters unavailable", zap.Error(err))
		default:
			r := cgroupstats.NewReaderWith(layout, cgroupstats.Options{
				SysfsRoot: cfg.Path.Sysfs, CPUs: onlineCPUs(cfg.Path.Sysfs, log), Log: log.Named("cgroupfs")})
			r.Only(groups)
			p.stats = append(p.stats, stats.WithResources(r))
		}
	}
	if cfg.Collector.Enabled[collector.NamePerf] {
		prof, err := profiling.New(profiling.Config{ProcfsRoot: cfg.Path.Procfs, EnvVars: cfg.Collector.PerfEnvVars,
			Hardware: cfg.Collector.PerfHardware, Software: cfg.Collector.PerfSoftware, Cache: cfg.Collector.PerfCache,
			MaxProcesses: cfg.Collector.PerfMaxProcesses, Log: log.Named("perf")})
		if err != nil {
			return p, nil, fmt.Errorf("collector.perf: %w", err)
		}
		c.closeLater("profiler", prof)
		p.stats = append(p.stats, stats.WithProfiler(prof))
	}
	if acc.bpfMode() {
		programs = append(programs, acc.bpf)
		// Cgroups created and removed between two reads keep their paths.
		names, err := bpfloader.LoadCgroupNames(bpfloader.Options{Hierarchy: hier, Log: log.Named("bpf")})
		if err != nil {
			log.Warn("cgroup names from cgroup_mkdir unavailable; cgroups removed between two reads are exported as id:N", zap.Error(err))
		} else {
			c.closeLater("cgroup names", names)
			p.stats = append(p.stats, stats.WithCgroupNames(names))
			programs = append(programs, names)
		}
	}
	if cfg.Collector.Enabled[collector.NameProbes] {
		if !acc.bpfMode() {
			log.Warn("collector.probes needs BPF accounting; disabled", zap.String("accounting_mode", acc.src.Mode()))
		} else {
			pr, err := openProbes(cfg, hier, log)
			if err != nil {
				return p, nil, err
			}
			c.closeLater("probes", pr)
			p.stats = append(p.stats, stats.WithProbes(pr))
			p.probes = true
			programs = append(programs, pr)
		}
	}
	return p, programs, nil
}

// registry builds the collectors from the configuration and registers them
// with the Go and process collectors.
func registry(cfg *config.Config, loop *stats.Loop, meter power.Meter, acc accounting, probes bool, programs []collector.ProgramStatsSource, c *components) (*prometheus.Registry, error) {
	enabled := map[string]bool{}
	for name, on := range cfg.Collector.Enabled {
		enabled[name] = on
	}
	// The probes collector follows the probes, which need BPF mode.
	enabled[collector.NameProbes] = probes
	if enabled[collector.NameBPFStats] {
		if !acc.bpfMode() {
			c.log.Warn("collector.bpf-stats needs BPF accounting; disabled", zap.String("accounting_mode", acc.src.Mode()))
			enabled[collector.NameBPFStats] = false
		} else {
			closer, err := bpfloader.EnableStats()
			if err != nil {
				return nil, fmt.Errorf("collector.bpf-stats: %w", err)
			}
			c.closeLater("BPF statistics", closer)
		}
	}
	hr, reportsHealth := meter.(power.HealthReporter)
	exp, err := collector.New(loop, collector.Options{
		Enabled:                enabled,
		ProcessTop:             cfg.Collector.ProcessTop,
		ProbesPerCgroup:        cfg.Collector.ProbesPerCgroup,
		CgroupWorkloads:        cfg.Collector.CgroupWorkloads,
		ProbesSoftirqWorkloads: cfg.Collector.ProbesSoftirqWorkloads,
		Programs:               programs,
		Levels:                 cfg.Collector.Levels(),
		MeterHealth:            reportsHealth && len(hr.Health()) > 0 || loop.HasGPUs(),
		IdleAttributed:         cfg.Power.IdlePolicy != "none",
		Emissions:              cfg.Emissions.Enabled,
		Log:                    c.log.Named("collector"),
	})
	if err != nil {
		return nil, fmt.Errorf("building collectors: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(exp); err != nil {
		return nil, fmt.Errorf("registering collectors: %w", err)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg, nil
}

// serveHTTP adds the HTTP server: /metrics, the health endpoints and the
// Alloy targets. On shutdown it stops reporting ready first, so that
// nothing new is routed here, then lets in-flight scrapes finish.
func serveHTTP(cfg *config.Config, reg *prometheus.Registry, loop *stats.Loop, ids *workload.Resolver, webSrv *webServer, c *components) error {
	h := newHandlers(loop)
	if cfg.Web.AlloyTargets {
		var err error
		if h.alloy, err = alloyTargets(cfg, loop, ids, c.log); err != nil {
			return err
		}
	}
	mux, err := newMux(cfg, reg, h, c.log)
	if err != nil {
		return err
	}
	webSrv.route(mux, h)
	c.actor(func() error {
		err := webSrv.serve()
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("serving HTTP: %w", err)
	}, func(error) {
		h.draining.Store(true)
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := webSrv.shutdown(sctx); err != nil {
			c.log.Warn("HTTP shutdown", zap.Error(err))
		}
	})
	return nil
}

// endedProcesses is how many ended processes the loop keeps publishing:
// those the process families could export (stats.Config.EndedProcesses).
func endedProcesses(cfg *config.Config) int {
	switch {
	case !cfg.Collector.Enabled[collector.NameProcess]:
		return -1
	case cfg.Collector.ProcessTop > 0:
		return cfg.Collector.ProcessTop
	default:
		return 0
	}
}

// onlineCPUs is the number of online CPUs, or the CPUs this process may run
// on where sysfs doesn't say.
func onlineCPUs(sysfs string, log *zap.Logger) int {
	cpus, err := power.OnlineCPUs(sysfs)
	if err != nil || cpus <= 0 {
		cpus = runtime.NumCPU()
		log.Warn("online CPUs unavailable; using the CPUs this process may run on", zap.Int("cpus", cpus), zap.Error(err))
	}
	return cpus
}

// startupGCPercent is the garbage collector's target while the exporter
// builds its parts. Loading the BPF objects decodes the kernel's BTF: many
// MB of short-lived garbage that, at the default GOGC=100, set the process's
// peak RSS (VmHWM) well above what it uses afterwards (issue 11).
const startupGCPercent = 20

// buildTight is build under startupGCPercent, unless GOGC was set by the
// user; the default is restored for the running exporter.
func buildTight(cfg *config.Config, c *components) error {
	if os.Getenv("GOGC") != "" {
		return build(cfg, c)
	}
	old := debug.SetGCPercent(startupGCPercent)
	defer debug.SetGCPercent(old)
	err := build(cfg, c)
	// What start-up freed (the kernel's BTF, decoded to load the BPF
	// objects) goes back to the kernel now rather than over minutes of
	// background scavenging: RSS after warm-up is then the running
	// exporter's, not its start-up's.
	debug.FreeOSMemory()
	return err
}
