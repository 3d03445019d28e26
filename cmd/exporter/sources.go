package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/alloy"
	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/kube"
)

// accounting is the per-task CPU accounting source and its mode. bpf is
// set in BPF mode only: the probes and the program statistics need it.
type accounting struct {
	src compose.UsageSource
	bpf *bpfloader.Accounting
}

// bpfMode reports whether BPF accounting runs, as the source says; the
// probes and the BPF program statistics exist only then.
func (a accounting) bpfMode() bool { return a.src.Mode() == bpfloader.Mode }

// openAccounting picks the per-task CPU accounting source, through the
// composition `wattrace measure` shares (internal/compose). In auto mode a BPF
// failure is not fatal: procfs works everywhere, just less precisely,
// and wattrace_accounting_mode tells which one runs.
func openAccounting(cfg *Config, hier cgroup.Hierarchy, res *cgroup.Resolver, cpus int, log *zap.Logger) (accounting, error) {
	ac := cfg.Accounting
	ac.Hierarchy, ac.Resolver, ac.ProcfsRoot, ac.CPUs = hier, res, cfg.Path.Procfs, cpus
	acc, err := compose.OpenAccounting(ac, log)
	switch {
	case errors.Is(err, compose.ErrAccountingMode):
		return accounting{}, fmt.Errorf("invalid value %q for accounting.mode: allowed %v", cfg.Accounting.Mode, compose.AccountingModes)
	case err != nil:
		return accounting{}, fmt.Errorf("accounting.mode=%s: %w", cfg.Accounting.Mode, err)
	}
	if acc.Fallback != nil {
		log.Warn("BPF accounting unavailable, falling back to procfs; set accounting.mode=bpf to make this fatal", zap.Error(acc.Fallback))
	}
	log.Info("accounting mode", zap.String("mode", acc.Src.Mode()))
	return accounting{src: acc.Src, bpf: acc.BPF}, nil
}

// openWorkloads builds the resolver that names cgroups after the workloads
// owning them. The kubelet client runs as a service of its own and never
// blocks resolution: without it, or while it is down, pods and containers
// keep the ids their cgroup paths carry.
func openWorkloads(cfg *Config, hier cgroup.Hierarchy, c *components) (*workload.Resolver, error) {
	o := cfg.Workload
	o.ProcRoot, o.EtcRoot, o.CgroupRoot = cfg.Path.Procfs, cfg.Path.Etc, hier.Mount
	if k := cfg.Kube; k.URL != "" {
		kc, err := kube.New(k)
		if err != nil {
			return nil, fmt.Errorf("workload.kube.url %s: %w", k.URL, err)
		}
		c.service("kubelet", func(ctx context.Context) error { kc.Run(ctx); return nil })
		o.Pods = kc
		c.log.Info("kubelet pod names", zap.String("url", k.URL))
	}
	return workload.NewResolver(o), nil
}

// openProbes loads the optional kernel probes. A probe the kernel can't
// run is logged and left out; only a bad configuration is an error. The
// accounting's task iterator folds their per-task counters, so that a step
// walks the tasks once.
func openProbes(cfg *Config, hier cgroup.Hierarchy, acc *bpfloader.Accounting, log *zap.Logger) (*bpfloader.Probes, error) {
	counters := make([]bpfloader.CounterEvent, 0, len(cfg.Probes.Counters))
	for _, name := range cfg.Probes.Counters {
		c, err := bpfloader.CounterByName(name)
		if err != nil {
			return nil, fmt.Errorf("collector.probes.counters: %w", err)
		}
		counters = append(counters, c)
	}
	disable := cfg.Probes.Disable
	if len(counters) == 0 {
		// No counter asked for: nothing is attached at context switches.
		disable = append(disable, reading.ProbeCounters)
	}
	p, err := bpfloader.LoadProbes(bpfloader.ProbeOptions{Hierarchy: hier, Log: log.Named("probes"),
		Disable: disable, Counters: counters, Accounting: acc})
	if err != nil {
		return nil, fmt.Errorf("collector.probes: %w", err)
	}
	log.Info("kernel probes", zap.Strings("active", p.Active()), zap.Strings("counters", p.Counters()))
	return p, nil
}

// alloyTargets serves the live processes that opted in to profiling as
// Grafana Alloy discovery.http targets, named after their workloads.
func alloyTargets(cfg *Config, loop *stats.Loop, ids *workload.Resolver, log *zap.Logger) (http.Handler, error) {
	filter, err := profiling.NewFilter(cfg.Perf.EnvVars)
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
