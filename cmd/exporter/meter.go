package main

import (
	"context"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/gpu/sysfs"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

// meterConfig maps the exporter's power.* settings to the meter table's
// configuration; discover.Open validates it and names the keys.
//
// gpus are the PCI addresses of the devices the GPU stage reads, in its
// zones' order: other meters leave their GPU zones of those devices out.
func meterConfig(cfg *config.Config, gpus []string) discover.Config {
	o := discover.Config{
		Source:         cfg.Power.Source,
		SysfsRoot:      cfg.Path.Sysfs,
		ProcfsRoot:     cfg.Path.Procfs,
		IPMI:           cfg.Power.IPMI,
		Capmc:          cfg.Power.Capmc,
		Interval:       cfg.Power.MeterInterval,
		Timeout:        cfg.Power.MeterTimeout,
		MinWattsPerCPU: cfg.Power.Estimator.MinWattsPerCPU,
		MaxWattsPerCPU: cfg.Power.Estimator.MaxWattsPerCPU,
		MaxWatts:       power.MaxWatts(cfg.Power.MaxWatts),
		// hwmon and pm_counters must not count a device the GPU stage
		// reads per device again as a node zone.
		GPUDevices:         gpus,
		APUs:               sysfs.APUs(cfg.Path.Sysfs),
		HostShare:          cfg.Power.HostShare.Path,
		HostShareStaleness: cfg.Power.HostShare.Staleness,
	}
	if r := cfg.Power.Redfish; r.URL != "" {
		o.Redfish = &redfish.Config{URL: r.URL, Chassis: r.Chassis, Username: r.Username, UsernameFile: r.UsernameFile,
			PasswordFile: r.PasswordFile, PasswordEnv: r.PasswordEnv, Auth: r.Auth, InsecureSkipVerify: r.InsecureSkipVerify,
			CAFile: r.CAFile, Timeout: r.Timeout, ExternalURL: r.ExternalURL, ExternalHeader: r.ExternalHeader}
	}
	return o
}

// openMeter opens the node's meter through the meter table: every
// configured meter that fails is logged at warn and retried, and its
// health reaches wattrace_source_*.
func openMeter(ctx context.Context, cfg *config.Config, gpus []string, log *zap.Logger) (power.Meter, error) {
	return discover.Open(ctx, meterConfig(cfg, gpus), log.Named("power"))
}
