package config

import (
	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/pkg/gpu/node"
)

// GPU energy (docs/gpu.md): which GPU sources are read, each device's idle
// model and attribution policy, and the allocation sources that say who
// holds a device. The values live in node.Config, which validates them
// naming the key.
const (
	KeyGPUNVML               = "gpu.nvml"
	KeyGPUSysfs              = "gpu.sysfs"
	KeyGPUIdleWatts          = "gpu.idle-watts"
	KeyGPUIdleLearnUtil      = "gpu.idle-learn-utilization"
	KeyGPUIdlePolicy         = "gpu.idle-policy"
	KeyGPUMaxWatts           = "gpu.max-watts"
	KeyGPUSlurm              = "gpu.slurm"
	KeyGPUSlurmOrderMap      = "gpu.slurm-gpu-order-map"
	KeyGPUPodResourcesSocket = "gpu.pod-resources-socket"
	KeyGPULibvirtRunDir      = "gpu.libvirt-run-dir"
)

func gpuFlags(fs *pflag.FlagSet) {
	fs.String(KeyGPUNVML, "auto", "Read NVIDIA GPUs through NVML (libnvidia-ml.so.1, loaded at run time): auto (when the driver is there) or off.")
	fs.String(KeyGPUSysfs, "auto", "Read AMD (amdgpu) and Intel (i915, xe) GPUs from hwmon and DRM fdinfo: auto or off. When on, these cards leave the hwmon meter's gpu zone, so nothing is counted twice.")
	fs.String(KeyGPUIdleWatts, "", "Fixed idle power per GPU, keyed by UUID, PCI address or index, e.g. 0=55,GPU-8f…=60. GPUs not listed learn idle power from the minimum seen at low utilization.")
	fs.Float64(KeyGPUIdleLearnUtil, 0, "Device utilization (0..1) at or below which an interval may teach a GPU's learned idle power.")
	fs.String(KeyGPUIdlePolicy, "none", "Who is credited with a GPU's idle energy: none (kept at device level) or holder (the Slurm job, pod or VM the GPU is allocated to). A passed-through GPU's whole energy always goes to its VM.")
	fs.Float64(KeyGPUMaxWatts, 0, "Ceiling on one GPU's plausible power; a reading implying more is rejected and counted. 0 = 2000.")
	fs.Bool(KeyGPUSlurm, false, "Find Slurm jobs' GPUs from SLURM_JOB_GPUS, SLURM_STEP_GPUS and CUDA_VISIBLE_DEVICES in /proc/PID/environ.")
	fs.String(KeyGPUSlurmOrderMap, "", "Slurm GPU index to device index map, e.g. 0:1,1:0.3 (MIG instance 3 of GPU 0). Empty: Slurm's index is the device index.")
	fs.String(KeyGPUPodResourcesSocket, "", "The kubelet's pod-resources socket (e.g. /var/lib/kubelet/pod-resources/kubelet.sock) to find the pods GPUs are allocated to. Empty: off.")
	fs.String(KeyGPULibvirtRunDir, "", "libvirt's run directory of domain status XML (e.g. /run/libvirt/qemu) to find GPUs passed through to VMs. Empty: off.")
}

func decodeGPU(d *decoder) node.Config {
	return node.Config{
		NVML:                 d.String(KeyGPUNVML),
		Sysfs:                d.String(KeyGPUSysfs),
		IdleWatts:            d.Map(KeyGPUIdleWatts),
		IdleLearnUtilization: d.Float(KeyGPUIdleLearnUtil),
		IdlePolicy:           d.String(KeyGPUIdlePolicy),
		MaxWatts:             d.Float(KeyGPUMaxWatts),
		Slurm:                d.Bool(KeyGPUSlurm),
		SlurmGPUOrderMap:     d.String(KeyGPUSlurmOrderMap),
		PodResourcesSocket:   d.String(KeyGPUPodResourcesSocket),
		LibvirtRunDir:        d.String(KeyGPULibvirtRunDir),
		SysfsRoot:            d.String(KeyPathSysfs),
		ProcfsRoot:           d.String(KeyPathProcfs),
	}
}
