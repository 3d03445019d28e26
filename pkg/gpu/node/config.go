package node

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/wattrace/wattrace/pkg/gpu/alloc"
)

// Config is the GPU part of the configuration. Keys are given as they
// would appear under `gpu:` in the config file; Validate names them.
type Config struct {
	// NVML is gpu.nvml: "auto" (default) or "off".
	NVML string
	// Sysfs is gpu.sysfs: "auto" (default) or "off" (amdgpu, i915, xe).
	Sysfs string
	// IdleWatts is gpu.idle-watts: the configured idle power per device,
	// keyed by UUID, PCI address or index ("GPU-…", "0000:3b:00.0",
	// "0"). A device without an entry learns its idle power.
	IdleWatts map[string]float64
	// IdleLearnUtilization is gpu.idle-learn-utilization: the device
	// utilization (0..1) at or below which an interval may teach the
	// learned idle power (default 0: only fully idle intervals).
	IdleLearnUtilization float64
	// IdlePolicy is gpu.idle-policy: "none" (default: idle stays at device
	// level) or "holder" (idle is credited to the allocation holder).
	IdlePolicy string
	// MaxWatts is gpu.max-watts: the per-device power ceiling readings are
	// validated against (default gpu.DefaultMaxWatts).
	MaxWatts float64
	// Slurm is gpu.slurm: read Slurm jobs' GPUs from /proc/*/environ.
	Slurm bool
	// SlurmGPUOrderMap is gpu.slurm-gpu-order-map ("0:1,1:0.3,…").
	SlurmGPUOrderMap string
	// PodResourcesSocket is gpu.pod-resources-socket; "" turns the
	// Kubernetes allocation source off.
	PodResourcesSocket string
	// LibvirtRunDir is gpu.libvirt-run-dir (/run/libvirt/qemu); "" turns
	// the libvirt allocation source off.
	LibvirtRunDir string

	// SampleEvery is power.meter-interval: how often a card that gives
	// only power (amdgpu) is sampled for the trapezoid rule.
	SampleEvery time.Duration

	// SysfsRoot and ProcfsRoot come from --path.sysfs and --path.procfs.
	SysfsRoot, ProcfsRoot string
}

// Validate reports every bad key.
func (c Config) Validate() error {
	var errs []error
	for key, v := range map[string]string{"gpu.nvml": c.NVML, "gpu.sysfs": c.Sysfs} {
		if v != "" && v != "auto" && v != "off" {
			errs = append(errs, fmt.Errorf("%s: %q is not auto or off", key, v))
		}
	}
	for dev, w := range c.IdleWatts {
		if dev == "" || !(w >= 0 && w <= math.MaxFloat64) {
			errs = append(errs, fmt.Errorf("gpu.idle-watts: device %q: %v is not a finite number of watts >= 0", dev, w))
		}
	}
	if !(c.IdleLearnUtilization >= 0 && c.IdleLearnUtilization <= 1) {
		errs = append(errs, fmt.Errorf("gpu.idle-learn-utilization: %v is not within 0..1", c.IdleLearnUtilization))
	}
	if c.IdlePolicy != "" && c.IdlePolicy != "none" && c.IdlePolicy != "holder" {
		errs = append(errs, fmt.Errorf("gpu.idle-policy: %q is not none or holder", c.IdlePolicy))
	}
	if !(c.MaxWatts >= 0 && c.MaxWatts <= 100_000) {
		errs = append(errs, fmt.Errorf("gpu.max-watts: %v is not within 0..100000", c.MaxWatts))
	}
	if _, err := alloc.ParseOrderMap(c.SlurmGPUOrderMap); err != nil {
		errs = append(errs, fmt.Errorf("gpu.slurm-gpu-order-map: %w", err))
	}
	return errors.Join(errs...)
}
