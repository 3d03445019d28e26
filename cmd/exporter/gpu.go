package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/power"
)

// composeConfig is the composition's configuration from the exporter's:
// the power.* settings as discover declared and the configuration decoded
// them, the path.* mounts, the CPU count start-up read, and gpu.*.
// `wattrace measure` builds the same composition from its flags.
func composeConfig(cfg *Config, cpus int) compose.Config {
	m := cfg.Power
	m.SysfsRoot, m.ProcfsRoot = cfg.Path.Sysfs, cfg.Path.Procfs
	m.CPUs = cpus
	return compose.Config{Power: m, GPU: cfg.GPU}
}

// openSources opens the node's GPU sources and meters through the
// composition shared with `wattrace measure`: the meters leave out the
// GPU zones of the devices the GPU stage reads and APUs' socket sensors,
// so that no device is counted twice. Every configured meter that fails
// is logged at warn and retried, and its health reaches
// wattrace_source_*.
func openSources(ctx context.Context, cfg *Config, cpus int, log *zap.Logger) (*compose.Node, error) {
	return compose.Open(ctx, composeConfig(cfg, cpus), log)
}

// openMeter opens the meters alone (the GPU sources off: every GPU zone
// is then a meter's).
func openMeter(ctx context.Context, cfg *Config, cpus int, log *zap.Logger) (power.Meter, error) {
	c := composeConfig(cfg, cpus)
	c.GPUOff = true
	n, err := compose.Open(ctx, c, log)
	if err != nil {
		return nil, err
	}
	return n.Meter, nil
}

// gpuStage is the stats loop's GPU stage over the composition's GPU
// sources, or nil on a node without GPUs: the loop then runs exactly as
// it would without GPU support, and the gpu families are absent.
func gpuStage(cfg *Config, n *compose.Node, log *zap.Logger) stats.Option {
	if n.GPUs == nil {
		return nil
	}
	log.Debug("GPU stage on", zap.Int("devices", len(n.GPUDevices)))
	return stats.WithGPUs(n.GPUs, stats.GPUConfig{IdleWatts: cfg.GPU.IdleWatts,
		IdleLearnUtilization: cfg.GPU.IdleLearnUtilization, IdlePolicy: cfg.GPU.IdlePolicy})
}
