package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/gpu/sysfs"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
)

// openMeter opens the node's meter through the meter table, from the
// power.* settings as discover declared and the configuration decoded
// them, plus the path.* mounts and what start-up learnt: the CPU count, and the devices the GPU
// stage reads (gpus, in its zones' order), whose GPU zones other meters
// leave out so that no device is counted twice. Every configured meter
// that fails is logged at warn and retried, and its health reaches
// wattrace_power_meter_*.
func openMeter(ctx context.Context, cfg *config.Config, cpus int, gpus []string, log *zap.Logger) (power.Meter, error) {
	m := cfg.Power.Config
	m.SysfsRoot, m.ProcfsRoot = cfg.Path.Sysfs, cfg.Path.Procfs
	m.CPUs = cpus
	m.GPUDevices = gpus
	m.APUs = sysfs.APUs(cfg.Path.Sysfs)
	return discover.Open(ctx, m, log.Named("power"))
}
