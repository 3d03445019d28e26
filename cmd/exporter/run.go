package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/alloy"
	"github.com/wattrace/wattrace/pkg/bpfloader"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/cgroupstats"
	"github.com/wattrace/wattrace/pkg/collector"
	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/power/redfish"
	"github.com/wattrace/wattrace/pkg/procfs"
	"github.com/wattrace/wattrace/pkg/profiling"
	"github.com/wattrace/wattrace/pkg/stats"
	"github.com/wattrace/wattrace/pkg/usage"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/kube"
)

// shutdownTimeout bounds how long in-flight scrapes may take once a signal
// arrives; Kubernetes' default grace period is 30s.
const shutdownTimeout = 10 * time.Second

// run wires the exporter together and blocks until ctx is done or a part
// fails. BPF programs are detached before it returns.
func run(ctx context.Context, cfg *config.Config, log *zap.Logger) error {
	log.Info("starting wattrace", zap.String("version", version.Info()), zap.String("build_context", version.BuildContext()))
	if cfg.Web.ConfigFile != "" {
		// Fail at start-up, not on the first TLS handshake.
		if err := web.Validate(cfg.Web.ConfigFile); err != nil {
			return fmt.Errorf("web.config.file %s: %w", cfg.Web.ConfigFile, err)
		}
	}

	hier, err := cgroup.Detect(cfg.Path.Procfs, cfg.Path.Cgroupfs, cfg.Cgroup.Hierarchy)
	if err != nil {
		return fmt.Errorf("detecting cgroup hierarchy (cgroup.hierarchy=%s): %w", cfg.Cgroup.Hierarchy, err)
	}
	log.Info("cgroup hierarchy", zap.String("hierarchy", string(hier.Kind)), zap.String("mount", hier.Mount))
	res := cgroup.NewResolver(hier)

	src, programs, err := openAccounting(cfg, hier, res, log)
	if err != nil {
		return err
	}
	// Closing the BPF source detaches its programs; do it on every exit path.
	defer func() {
		if err := src.Close(); err != nil {
			log.Warn("closing accounting source", zap.Error(err))
		}
	}()

	meter, err := openMeter(ctx, cfg, log)
	if err != nil {
		return err
	}
	if c, ok := meter.(interface{ Close() error }); ok {
		// Logs out of Redfish, closes /dev/ipmi0 and perf descriptors.
		defer c.Close()
	}

	sockets, err := power.CPUSockets(cfg.Path.Sysfs)
	if err != nil {
		// Without the topology all usage lands on one socket: per-socket
		// splits are then wrong, node totals still right.
		log.Warn("CPU topology unavailable; treating the node as one socket", zap.Error(err))
		sockets = nil
	}
	cpus, err := power.OnlineCPUs(cfg.Path.Sysfs)
	if err != nil {
		cpus = runtime.NumCPU()
		log.Warn("online CPUs unavailable; using the CPUs this process may run on", zap.Int("cpus", cpus), zap.Error(err))
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	levels := cfg.Collector.Levels()
	var loopOpts []stats.Option
	var ids *workload.Resolver
	if len(levels) > 0 || cfg.Web.AlloyTargets {
		ids, err = openWorkloads(ctx, cfg, hier, log)
		if err != nil {
			return err
		}
	}
	if len(levels) > 0 {
		loopOpts = append(loopOpts, stats.WithWorkloads(ids, levels))
		layout, err := cgroupstats.DetectLayout(cfg.Path.Procfs, cfg.Path.Cgroupfs)
		if err != nil {
			// Energy and CPU per workload still work; only the
			// cgroupfs resource counters are missing.
			log.Warn("cgroup resource counters unavailable", zap.Error(err))
		} else {
			loopOpts = append(loopOpts, stats.WithResources(cgroupstats.NewReader(layout, cfg.Path.Sysfs)))
		}
	}

	if cfg.Collector.Perf {
		prof, err := profiling.New(profiling.Config{ProcfsRoot: cfg.Path.Procfs, EnvVars: cfg.Collector.PerfEnvVars,
			Hardware: cfg.Collector.PerfHardware, Software: cfg.Collector.PerfSoftware, Cache: cfg.Collector.PerfCache,
			MaxProcesses: cfg.Collector.PerfMaxProcesses, Log: log.Named("perf")})
		if err != nil {
			return fmt.Errorf("collector.perf: %w", err)
		}
		defer prof.Close()
		loopOpts = append(loopOpts, stats.WithProfiler(prof))
	}

	probesOn := false
	if cfg.Collector.Probes {
		if programs == nil {
			log.Warn("collector.probes needs BPF accounting; disabled", zap.String("accounting_mode", src.Mode()))
		} else {
			p, err := openProbes(cfg, hier, log)
			if err != nil {
				return err
			}
			defer p.Close()
			loopOpts = append(loopOpts, stats.WithProbes(p))
			probesOn = true
		}
	}

	loop, err := stats.New(stats.Config{
		Interval:    cfg.Stats.Interval,
		Retention:   cfg.Stats.Retention,
		IdlePolicy:  cfg.Power.IdlePolicy,
		IdleWatts:   cfg.Power.IdleWatts,
		Sockets:     sockets,
		CPUs:        cpus,
		Hierarchy:   string(hier.Kind),
		UsageMetric: cfg.Power.UsageMetric,
	}, src, meter, res, log.Named("stats"), loopOpts...)
	if err != nil {
		return fmt.Errorf("starting stats loop: %w", err)
	}

	bpfStats := cfg.Collector.BPFStats
	if bpfStats {
		if programs == nil {
			log.Warn("collector.bpf-stats needs BPF accounting; disabled", zap.String("accounting_mode", src.Mode()))
			bpfStats = false
		} else {
			closer, err := bpfloader.EnableStats()
			if err != nil {
				return fmt.Errorf("collector.bpf-stats: %w", err)
			}
			defer closer.Close()
		}
	}

	exp, err := collector.New(loop, collector.Options{
		Node:           cfg.Collector.Node,
		Cgroup:         cfg.Collector.Cgroup,
		Process:        cfg.Collector.Process,
		ProcessTop:     cfg.Collector.ProcessTop,
		BPFStats:       bpfStats,
		Programs:       programs,
		Levels:         levels,
		Probes:         probesOn,
		Perf:           cfg.Collector.Perf,
		Meters:         meterStatus(meter),
		IdleAttributed: cfg.Power.IdlePolicy != "none",
		Log:            log.Named("collector"),
	})
	if err != nil {
		return fmt.Errorf("building collectors: %w", err)
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(exp); err != nil {
		return fmt.Errorf("registering collectors: %w", err)
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)

	h := newHandlers(loop)
	if cfg.Web.AlloyTargets {
		if h.alloy, err = alloyTargets(cfg, loop, ids, log); err != nil {
			return err
		}
	}
	mux, err := newMux(cfg, reg, h, log)
	if err != nil {
		return err
	}
	webSrv, err := newWebServer(cfg, mux, h, newSlogLogger(log, "web"))
	if err != nil {
		return err
	}

	loopDone := make(chan error, 1)
	go func() { loopDone <- loop.Run(ctx) }()
	serveDone := make(chan error, 1)
	go func() { serveDone <- webSrv.serve() }()

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case err := <-serveDone:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("serving HTTP: %w", err)
		}
	case err := <-loopDone:
		loopDone <- err // put back for the wait below
		if err == nil {
			err = errors.New("returned unexpectedly")
		}
		runErr = fmt.Errorf("stats loop: %w", err)
	}

	// Stop reporting ready first so that nothing new is routed here.
	h.draining.Store(true)
	sctx, scancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer scancel()
	if err := webSrv.shutdown(sctx); err != nil {
		log.Warn("HTTP shutdown", zap.Error(err))
	}
	cancel()
	if err := <-loopDone; err != nil && !errors.Is(err, context.Canceled) && runErr == nil {
		runErr = fmt.Errorf("stats loop: %w", err)
	}
	return runErr
}

// openAccounting picks the per-task CPU accounting source. In auto mode a
// BPF failure is not fatal: procfs works everywhere, just less precisely,
// and wattrace_accounting_mode tells which one runs. The returned program
// statistics source is nil unless BPF accounting runs.
func openAccounting(cfg *config.Config, hier cgroup.Hierarchy, res *cgroup.Resolver, log *zap.Logger) (usage.Source, collector.ProgramStatsSource, error) {
	openProcfs := func() (usage.Source, error) {
		s, err := procfs.New(procfs.Options{ProcfsRoot: cfg.Path.Procfs, Hierarchy: hier, Resolver: res})
		if err != nil {
			return nil, fmt.Errorf("procfs accounting: %w", err)
		}
		return s, nil
	}
	switch cfg.Accounting.Mode {
	case "procfs":
		s, err := openProcfs()
		if err != nil {
			return nil, nil, fmt.Errorf("accounting.mode=procfs: %w", err)
		}
		log.Info("accounting mode", zap.String("mode", s.Mode()))
		return s, nil, nil
	case "bpf", "auto":
		acc, err := bpfloader.Load(bpfloader.Options{Hierarchy: hier, Log: log.Named("bpf")})
		if err == nil {
			log.Info("accounting mode", zap.String("mode", acc.Mode()))
			return acc, bpfPrograms{acc}, nil
		}
		if cfg.Accounting.Mode == "bpf" {
			return nil, nil, fmt.Errorf("accounting.mode=bpf: loading BPF programs: %w", err)
		}
		log.Warn("BPF accounting unavailable, falling back to procfs; set accounting.mode=bpf to make this fatal", zap.Error(err))
		s, perr := openProcfs()
		if perr != nil {
			return nil, nil, fmt.Errorf("accounting.mode=auto: BPF failed (%v) and %w", err, perr)
		}
		log.Info("accounting mode", zap.String("mode", s.Mode()))
		return s, nil, nil
	default:
		return nil, nil, fmt.Errorf("invalid value %q for accounting.mode: allowed %v", cfg.Accounting.Mode, config.AccountingModes)
	}
}

// openWorkloads builds the resolver that names cgroups after the workloads
// owning them. The kubelet client runs in the background until ctx ends and
// never blocks resolution: without it, or while it is down, pods and
// containers keep the ids their cgroup paths carry.
func openWorkloads(ctx context.Context, cfg *config.Config, hier cgroup.Hierarchy, log *zap.Logger) (*workload.Resolver, error) {
	o := workload.Options{
		ProcRoot:    cfg.Path.Procfs,
		EtcRoot:     cfg.Path.Etc,
		CgroupRoot:  hier.Mount,
		LibvirtDirs: cfg.Workload.LibvirtDirs,
	}
	if k := cfg.Workload.Kube; k.URL != "" {
		c, err := kube.New(kube.Config{URL: k.URL, TokenFile: k.TokenFile, CAFile: k.CAFile,
			InsecureSkipVerify: k.InsecureSkipVerify, Refresh: k.Refresh})
		if err != nil {
			return nil, fmt.Errorf("workload.kube.url %s: %w", k.URL, err)
		}
		go c.Run(ctx)
		o.Pods = c
		log.Info("kubelet pod names", zap.String("url", k.URL))
	}
	return workload.NewResolver(o), nil
}

// openProbes loads the optional kernel probes. A probe the kernel can't
// run is logged and left out; only a bad configuration is an error.
func openProbes(cfg *config.Config, hier cgroup.Hierarchy, log *zap.Logger) (*bpfloader.Probes, error) {
	counters := make([]bpfloader.CounterEvent, 0, len(cfg.Collector.ProbesCounters))
	for _, name := range cfg.Collector.ProbesCounters {
		c, err := bpfloader.CounterByName(name)
		if err != nil {
			return nil, fmt.Errorf("collector.probes.counters: %w", err)
		}
		counters = append(counters, c)
	}
	disable := cfg.Collector.ProbesDisable
	if len(counters) == 0 {
		// No counter asked for: nothing is attached at context switches.
		disable = append(disable, bpfloader.ProbeCounters)
	}
	p, err := bpfloader.LoadProbes(bpfloader.ProbeOptions{Hierarchy: hier, Log: log.Named("probes"),
		Disable: disable, Counters: counters})
	if err != nil {
		return nil, fmt.Errorf("collector.probes: %w", err)
	}
	log.Info("kernel probes", zap.Strings("active", p.Active()), zap.Strings("counters", p.Counters()))
	return p, nil
}

// alloyTargets serves the live processes that opted in to profiling as
// Grafana Alloy discovery.http targets, named after their workloads.
func alloyTargets(cfg *config.Config, loop *stats.Loop, ids *workload.Resolver, log *zap.Logger) (http.Handler, error) {
	filter, err := profiling.NewFilter(cfg.Collector.PerfEnvVars)
	if err != nil {
		return nil, fmt.Errorf("collector.perf.env-var: %w", err)
	}
	src := alloy.SourceFunc(func() []alloy.Target {
		snap := loop.Snapshot()
		if snap == nil {
			return nil
		}
		out := make([]alloy.Target, 0, len(snap.Processes))
		for _, p := range snap.Processes {
			if !p.Alive {
				continue
			}
			id := ids.Resolve(p.Cgroup)
			out = append(out, alloy.NewTarget(p.PID, p.Comm, p.Cgroup, &id))
		}
		return out
	})
	h, err := alloy.NewHandler(alloy.Config{Source: src, Filter: filter, ProcfsRoot: cfg.Path.Procfs, Log: log.Named("alloy")})
	if err != nil {
		return nil, fmt.Errorf("web.alloy-targets: %w", err)
	}
	return h, nil
}

// cachedMeter is a meter read in the background (*power.Cached).
type cachedMeter interface {
	Name() string
	Age() time.Duration
	LastError() error
	Reads() (total, failed uint64)
}

// slowMeters adapts the background meters among a combined meter's members
// to the collector's interface.
type slowMeters []cachedMeter

func (s slowMeters) MeterStatus() []collector.MeterStatus {
	out := make([]collector.MeterStatus, len(s))
	for i, m := range s {
		reads, fails := m.Reads()
		out[i] = collector.MeterStatus{Source: m.Name(), Age: m.Age(), Up: m.LastError() == nil, Reads: reads, Fails: fails}
	}
	return out
}

// meterStatus returns the background meters' health source, nil when the
// node has none (so no empty family is described).
func meterStatus(m power.Meter) collector.MeterStatusSource {
	members := []power.Meter{m}
	if c, ok := m.(interface{ Meters() []power.Meter }); ok {
		members = c.Meters()
	}
	var out slowMeters
	for _, mm := range members {
		if c, ok := mm.(cachedMeter); ok {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// bpfPrograms adapts the loader's statistics to the collector's interface,
// which is declared there so the collector package doesn't depend on BPF.
type bpfPrograms struct{ a *bpfloader.Accounting }

func (p bpfPrograms) ProgramStats() ([]collector.ProgramStat, error) {
	ps, err := p.a.ProgramStats()
	if err != nil {
		return nil, err
	}
	out := make([]collector.ProgramStat, len(ps))
	for i, s := range ps {
		out[i] = collector.ProgramStat{Name: s.Name, RunTime: s.RunTime, RunCount: s.RunCount}
	}
	return out, nil
}

// openMeter picks the energy source. In auto mode RAPL is used only if a
// first read succeeds: the sysfs files can exist yet be unreadable
// (energy_uj is root-only since 5.10), which would otherwise surface as
// silent zeros later.
func openMeter(ctx context.Context, cfg *config.Config, log *zap.Logger) (power.Meter, error) {
	switch cfg.Power.Source {
	case "rapl":
		m, err := openRAPL(cfg.Path.Sysfs)
		if err != nil {
			return nil, fmt.Errorf("power.source=rapl: %w", err)
		}
		log.Info("power source", zap.String("source", m.Name()), zap.String("method", "measured"))
		return m, nil
	case "estimator":
		return openEstimator(cfg, log, "power.source=estimator")
	case "auto":
		o := discover.Options{SysfsRoot: cfg.Path.Sysfs, NoIPMI: cfg.Power.IPMI == "off",
			Interval: cfg.Power.MeterInterval, Timeout: cfg.Power.MeterTimeout}
		if r := cfg.Power.Redfish; r.URL != "" {
			o.Redfish = &redfish.Config{URL: r.URL, Chassis: r.Chassis, Username: r.Username, UsernameFile: r.UsernameFile,
				PasswordFile: r.PasswordFile, PasswordEnv: r.PasswordEnv, Auth: r.Auth, InsecureSkipVerify: r.InsecureSkipVerify,
				CAFile: r.CAFile, Timeout: r.Timeout, ExternalURL: r.ExternalURL, ExternalHeader: r.ExternalHeader}
			if err := o.Redfish.Validate(); err != nil {
				return nil, fmt.Errorf("power.redfish: %w", err)
			}
		}
		m, found, err := discover.Discover(ctx, o)
		for _, line := range found {
			log.Info("power meter discovery", zap.String("result", line))
		}
		if err == nil {
			log.Info("power source", zap.String("source", m.Name()), zap.String("method", "measured"))
			return m, nil
		}
		return openEstimator(cfg, log, "no meter measures this node: "+err.Error())
	default:
		return nil, fmt.Errorf("invalid value %q for power.source: allowed %v", cfg.Power.Source, config.PowerSources)
	}
}

func openRAPL(sysfs string) (power.Meter, error) {
	r, err := power.NewRAPL(sysfs)
	if err != nil {
		return nil, fmt.Errorf("opening RAPL under %s: %w", sysfs, err)
	}
	if _, err := r.Read(); err != nil {
		return nil, fmt.Errorf("first RAPL read (energy_uj needs root or CAP_DAC_READ_SEARCH on kernels >= 5.10): %w", err)
	}
	return r, nil
}

func openEstimator(cfg *config.Config, log *zap.Logger, why string) (power.Meter, error) {
	model, err := power.CPUModel(cfg.Path.Procfs)
	if err != nil {
		log.Warn("CPU model unknown; estimator uses average coefficients", zap.Error(err))
	}
	cpus, err := power.OnlineCPUs(cfg.Path.Sysfs)
	if err != nil || cpus <= 0 {
		cpus = runtime.NumCPU()
		log.Warn("online CPUs unavailable; using the CPUs this process may run on", zap.Int("cpus", cpus), zap.Error(err))
	}
	c := power.LookupCoefficients(model, cpus)
	if v := cfg.Power.Estimator.MinWattsPerCPU; v > 0 {
		c.MinWattsPerCPU = v
		c.Source = "configuration"
	}
	if v := cfg.Power.Estimator.MaxWattsPerCPU; v > 0 {
		c.MaxWattsPerCPU = v
		c.Source = "configuration"
	}
	e, err := power.NewEstimator(c)
	if err != nil {
		return nil, fmt.Errorf("estimator (power.estimator.min-watts-per-cpu=%g, max-watts-per-cpu=%g): %w", c.MinWattsPerCPU, c.MaxWattsPerCPU, err)
	}
	log.Info("power source: estimator; energy is modelled and exported with method=\"estimated\"",
		zap.String("reason", why), zap.String("cpu_model", model), zap.Int("cpus", cpus),
		zap.String("arch", c.Arch), zap.Float64("min_watts_per_cpu", c.MinWattsPerCPU),
		zap.Float64("max_watts_per_cpu", c.MaxWattsPerCPU), zap.String("coefficients_source", c.Source))
	return e, nil
}
