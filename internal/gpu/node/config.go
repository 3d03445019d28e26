package node

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
)

// Config is the GPU part of the configuration: the gpu.* settings, which
// it declares itself (Declare), and what the exporter sets at start-up.
// Every error names its key.
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

	// Rescan is how often the sources look for devices that appeared
	// after start (a hot-plugged card, a driver that loaded late): the
	// sysfs source's DRM listing, and a source kind that had no device at
	// start, tried again after Rescan, doubling up to a minute. 0: 5 s.
	Rescan time.Duration
}

// The gpu.* keys.
const (
	KeyNVML               = "gpu.nvml"
	KeySysfs              = "gpu.sysfs"
	KeyIdleWatts          = "gpu.idle-watts"
	KeyIdleLearnUtil      = "gpu.idle-learn-utilization"
	KeyIdlePolicy         = "gpu.idle-policy"
	KeyMaxWatts           = "gpu.max-watts"
	KeySlurm              = "gpu.slurm"
	KeySlurmOrderMap      = "gpu.slurm-gpu-order-map"
	KeyPodResourcesSocket = "gpu.pod-resources-socket"
	KeyLibvirtRunDir      = "gpu.libvirt-run-dir"
)

// Declare declares the gpu.* settings, bound to c, each with its check;
// SampleEvery and the roots are the exporter's to set, and Rescan is no
// setting (tests shorten it).
func (c *Config) Declare(s *setting.Set) {
	s.String(&c.NVML, KeyNVML, "auto", "Read NVIDIA GPUs through NVML (libnvidia-ml.so.1, loaded at run time): auto (when the driver is there) or off.").Checked(autoOrOff(KeyNVML, &c.NVML))
	s.String(&c.Sysfs, KeySysfs, "auto", "Read AMD (amdgpu) and Intel (i915, xe) GPUs from hwmon and DRM fdinfo: auto or off. When on, these cards leave the hwmon meter's gpu zone, so nothing is counted twice.").Checked(autoOrOff(KeySysfs, &c.Sysfs))
	s.Map(&c.IdleWatts, KeyIdleWatts, "Fixed idle power per GPU, keyed by UUID, PCI address or index, e.g. 0=55,GPU-8f…=60. GPUs not listed learn idle power from the minimum seen at low utilization.").Checked(func() error {
		var errs []error
		for _, dev := range setting.SortedKeys(c.IdleWatts) {
			if w := c.IdleWatts[dev]; dev == "" || !(w >= 0 && w <= math.MaxFloat64) {
				errs = append(errs, fmt.Errorf("%s: device %q: %v is not a finite number of watts >= 0", KeyIdleWatts, dev, w))
			}
		}
		return errors.Join(errs...)
	})
	s.Float(&c.IdleLearnUtilization, KeyIdleLearnUtil, 0, "Device utilization (0..1) at or below which an interval may teach a GPU's learned idle power.").Checked(func() error {
		if !(c.IdleLearnUtilization >= 0 && c.IdleLearnUtilization <= 1) {
			return fmt.Errorf("%s: %v is not within 0..1", KeyIdleLearnUtil, c.IdleLearnUtilization)
		}
		return nil
	})
	s.String(&c.IdlePolicy, KeyIdlePolicy, "none", "Who is credited with a GPU's idle energy: none (kept at device level) or holder (the Slurm job, pod or VM the GPU is allocated to). A passed-through GPU's whole energy always goes to its VM.").Checked(func() error {
		if c.IdlePolicy != "" && c.IdlePolicy != "none" && c.IdlePolicy != "holder" {
			return fmt.Errorf("%s: %q is not none or holder", KeyIdlePolicy, c.IdlePolicy)
		}
		return nil
	})
	s.Float(&c.MaxWatts, KeyMaxWatts, 0, "Ceiling on one GPU's plausible power; a reading implying more is rejected and counted. 0 = 2000.").Checked(func() error {
		if !(c.MaxWatts >= 0 && c.MaxWatts <= 100_000) {
			return fmt.Errorf("%s: %v is not within 0..100000", KeyMaxWatts, c.MaxWatts)
		}
		return nil
	})
	s.Bool(&c.Slurm, KeySlurm, false, "Find Slurm jobs' GPUs from SLURM_JOB_GPUS, SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES in /proc/PID/environ.")
	s.String(&c.SlurmGPUOrderMap, KeySlurmOrderMap, "", "Slurm GPU index to device index map, e.g. 0:1,1:0.3 (MIG instance 3 of GPU 0). Empty: Slurm's index is the device index.").Checked(func() error {
		if _, err := alloc.ParseOrderMap(c.SlurmGPUOrderMap); err != nil {
			return fmt.Errorf("%s: %w", KeySlurmOrderMap, err)
		}
		return nil
	})
	s.String(&c.PodResourcesSocket, KeyPodResourcesSocket, "", "The kubelet's pod-resources socket (e.g. /var/lib/kubelet/pod-resources/kubelet.sock) to find the pods GPUs are allocated to. Empty: off.")
	s.String(&c.LibvirtRunDir, KeyLibvirtRunDir, "", "libvirt's run directory of domain status XML (e.g. /run/libvirt/qemu) to find GPUs passed through to VMs. Empty: off.")
}

// autoOrOff checks gpu.nvml or gpu.sysfs; empty is auto.
func autoOrOff(key string, v *string) func() error {
	return func() error {
		if *v != "" && *v != "auto" && *v != "off" {
			return fmt.Errorf("%s: %q is not auto or off", key, *v)
		}
		return nil
	}
}

// Validate reports every bad key, as the configuration's checks do.
func (c Config) Validate() error {
	s := &setting.Set{}
	c.Declare(s)
	return s.Check()
}
