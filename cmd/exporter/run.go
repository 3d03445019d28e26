package main

import (
	"context"
	"os"
	"runtime/debug"
	"time"

	"github.com/prometheus/common/version"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/collector"
)

// shutdownTimeout bounds how long in-flight scrapes may take once a signal
// arrives; Kubernetes' default grace period is 30s.
const shutdownTimeout = 10 * time.Second

// run builds the exporter's components, runs them until ctx is done or
// one fails, and closes them (BPF programs are detached) before returning.
func run(ctx context.Context, cfg *Config, log *zap.Logger) error {
	log.Info("starting wattrace", zap.String("version", version.Info()), zap.String("build_context", version.BuildContext()))
	c := newComponents(log)
	defer c.close()
	if err := buildTight(cfg, c); err != nil {
		return err
	}
	if n, err := releaseBinaryPages(); err != nil {
		log.Debug("start-up code left resident", zap.Int("released_bytes", n), zap.Error(err))
	}
	// Once running: the heap kept near what is live, not twice it.
	_, stop := startMemoryLimit(cfg.Runtime.MemoryHeadroom)
	defer stop()
	return c.run(ctx)
}

// endedProcesses is how many ended processes the loop keeps publishing:
// those the process families could export (stats.Config.EndedProcesses).
func endedProcesses(cfg *Config) int {
	switch {
	case !cfg.Collector.Enabled[collector.NameProcess]:
		return -1
	case cfg.Collector.Settings.Process().Top > 0:
		return cfg.Collector.Settings.Process().Top
	default:
		return 0
	}
}

// startupGCPercent is the garbage collector's target while the exporter
// builds its parts. Loading the BPF objects decodes the kernel's BTF: many
// MB of short-lived garbage that, at the default GOGC=100, set the process's
// peak RSS (VmHWM) well above what it uses afterwards.
const startupGCPercent = 20

// buildTight is build under startupGCPercent, unless GOGC was set by the
// user; the default is restored for the running exporter.
func buildTight(cfg *Config, c *components) error {
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
