package discover

import (
	"errors"
	"fmt"
	"math"
	"os/exec"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/power/ipmi"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

// Config is everything Open needs. It mirrors the exporter's power.*
// settings (each field names its key) without importing the configuration
// package, so pkg/power stays below it.
type Config struct {
	// Source is power.source: auto (every meter found, the estimator when
	// none measures), rapl, or estimator. Empty means auto.
	Source string
	// SysfsRoot and ProcfsRoot are path.sysfs and path.procfs ("/sys",
	// "/proc" when empty).
	SysfsRoot, ProcfsRoot string
	// IPMI is power.ipmi: auto or off. Empty means auto.
	IPMI string
	// Capmc is power.capmc: off (the default when empty) or auto (use
	// `capmc get_system_power` when it is on PATH).
	Capmc string
	// Interval and Timeout are power.meter-interval and
	// power.meter-timeout: how often slow meters (BMCs, hwmon) are read in
	// the background and how long one read may take (1s and 5s when 0).
	Interval, Timeout time.Duration
	// Redfish is power.redfish.*; nil when power.redfish.url is empty.
	Redfish *redfish.Config
	// MinWattsPerCPU and MaxWattsPerCPU are
	// power.estimator.min-watts-per-cpu and max-watts-per-cpu; 0 takes the
	// built-in table's figure.
	MinWattsPerCPU, MaxWattsPerCPU float64
	// MaxWatts is power.max-watts: per-zone ceilings (watts per socket for
	// package, core, uncore and dram, per device for gpu, per node for psys
	// and platform); zones not set use power.DefaultMaxWatts.
	MaxWatts power.MaxWatts
	// GPUDevices are the PCI addresses of the devices the GPU stage reads
	// itself (gpu.nvml, gpu.sysfs), in the order of its zones (socket 0,
	// 1, …). Another meter's GPU zone of such a device (a hwmon amdgpu,
	// i915 or xe chip; a Cray pm_counters accelN zone, N < len) is left
	// out, so no GPU feeds workloads twice; the GPU zones of devices the
	// stage cannot read stay, numbered after the stage's.
	GPUDevices []string
	// APUs are the PCI addresses of AMD APUs, whose amdgpu power sensor
	// reports the whole socket, CPU included: never a GPU zone, since the
	// package zone counts that energy already.
	APUs []string
	// HostShare is power.host-share.path: in a guest, where its host's
	// share is mounted (empty: never look); HostShareStaleness is
	// power.host-share.staleness.
	HostShare          string
	HostShareStaleness time.Duration
	// Retry tunes the background retries of configured meters that fail
	// at start (5s doubling to 5m when zero); its Log is set by Open.
	Retry power.RetryOptions

	// For tests: IPMIDevices overrides ipmi.DevicePaths, LookPath finds
	// IPMI tools and capmc (exec.LookPath when nil).
	IPMIDevices []string
	LookPath    func(string) (string, error)
	// openIPMI opens the OpenIPMI device (ipmi.Open); tests fake it.
	openIPMI func(paths []string) (ipmi.Conn, string, error)
}

// Sources, IPMIModes and CapmcModes are the allowed values of power.source,
// power.ipmi and power.capmc.
var (
	Sources    = []string{"auto", "rapl", "estimator"}
	IPMIModes  = []string{"auto", "off"}
	CapmcModes = []string{"off", "auto"}
)

// Validate checks the configuration; every error names its key.
func (c Config) Validate() error {
	var errs []error
	enum := func(key, val string, allowed []string) {
		if val == "" {
			return
		}
		for _, a := range allowed {
			if val == a {
				return
			}
		}
		errs = append(errs, fmt.Errorf("invalid value %q for %s: allowed %s", val, key, strings.Join(allowed, ", ")))
	}
	enum("power.source", c.Source, Sources)
	enum("power.ipmi", c.IPMI, IPMIModes)
	enum("power.capmc", c.Capmc, CapmcModes)
	if c.Interval < 0 {
		errs = append(errs, fmt.Errorf("invalid value %q for power.meter-interval: must be > 0", c.Interval))
	}
	if c.Timeout < 0 {
		errs = append(errs, fmt.Errorf("invalid value %q for power.meter-timeout: must be > 0", c.Timeout))
	}
	errs = append(errs, ValidateWattsPerCPU(c.MinWattsPerCPU, c.MaxWattsPerCPU)...)
	if err := ValidateMaxWatts("power.max-watts", c.MaxWatts); err != nil {
		errs = append(errs, err)
	}
	if c.Redfish != nil {
		if err := c.Redfish.Validate(); err != nil {
			// redfish names its settings "redfish.<key>".
			errs = append(errs, fmt.Errorf("power.%w", err))
		}
	}
	return errors.Join(errs...)
}

// ValidateWattsPerCPU checks power.estimator.min-watts-per-cpu and
// max-watts-per-cpu: finite, in [0, curves.MaxWattsPerVCPU] (0 = from
// the table), max not below min. The configuration package calls it too.
func ValidateWattsPerCPU(min, max float64) []error {
	var errs []error
	for _, kv := range []struct {
		key string
		v   float64
	}{{"power.estimator.min-watts-per-cpu", min}, {"power.estimator.max-watts-per-cpu", max}} {
		if math.IsNaN(kv.v) || math.IsInf(kv.v, 0) || kv.v < 0 || kv.v > curves.MaxWattsPerVCPU {
			errs = append(errs, fmt.Errorf("invalid value %q for %s: want a finite number of watts in [0, %d] (0 = from the CPU model table)",
				fmt.Sprint(kv.v), kv.key, curves.MaxWattsPerVCPU))
		}
	}
	if len(errs) == 0 && min > 0 && max > 0 && max < min {
		errs = append(errs, fmt.Errorf("invalid value %q for power.estimator.max-watts-per-cpu: must be >= power.estimator.min-watts-per-cpu (%g)", fmt.Sprint(max), min))
	}
	return errs
}

// ValidateMaxWatts checks per-zone ceilings: known zones, finite, positive,
// at most 1 MW. key names the setting in the error.
func ValidateMaxWatts(key string, m power.MaxWatts) error {
	return power.ValidateMaxWatts(key, m)
}

func (c Config) withDefaults() Config {
	if c.Source == "" {
		c.Source = "auto"
	}
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
	if c.ProcfsRoot == "" {
		c.ProcfsRoot = "/proc"
	}
	if c.IPMI == "" {
		c.IPMI = "auto"
	}
	if c.Capmc == "" {
		c.Capmc = "off"
	}
	if c.Interval <= 0 {
		c.Interval = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = 5 * time.Second
	}
	if c.LookPath == nil {
		c.LookPath = exec.LookPath
	}
	if c.openIPMI == nil {
		c.openIPMI = func(paths []string) (ipmi.Conn, string, error) {
			d, err := ipmi.Open(paths...)
			if err != nil {
				return nil, "", err
			}
			return d, d.Path(), nil
		}
	}
	return c
}
