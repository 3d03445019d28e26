package main

// The meter is opened here until pkg/power's meter table replaces openMeter
// (issue 10); the rest of the exporter sees only a power.Meter.

import (
	"context"
	"fmt"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/config"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

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
			Interval: cfg.Power.MeterInterval, Timeout: cfg.Power.MeterTimeout,
			// The GPU source reads amdgpu/i915/xe per device when gpu.sysfs is on.
			GPUsElsewhere: cfg.GPU.Sysfs != "off"}
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
	cpus := onlineCPUs(cfg.Path.Sysfs, log)
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
