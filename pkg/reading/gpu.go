package reading

import "time"

// What the GPU sources hand the stats loop each interval: every device's
// validated reading and who holds it. pkg/gpu and its readers produce these;
// the loop splits them without importing any GPU source.

// GPUVendor names a GPU maker, the `vendor` of a GPUDevice.
type GPUVendor string

const (
	VendorNVIDIA GPUVendor = "nvidia"
	VendorAMD    GPUVendor = "amd"
	VendorIntel  GPUVendor = "intel"
)

// GPUMethod says how a device's energy was obtained: the `method` label.
type GPUMethod string

const (
	// MethodCounter: the device's own cumulative energy counter (NVML
	// GetTotalEnergyConsumption in mJ, i915/xe hwmon energy1_input in µJ).
	MethodCounter GPUMethod = "counter"
	// MethodPowerIntegrated: instantaneous or averaged power (NVML GetPowerUsage,
	// amdgpu power1_average/power1_input) times the interval. On NVIDIA
	// Ampere (except GA100) and newer GetPowerUsage is a 1 s average, and
	// amdgpu's power1_average is the SMU's own running average, so an
	// interval's energy lags a load step by up to that window.
	MethodPowerIntegrated GPUMethod = "power_integrated"
)

// GPUBasis says what per-process weights measure: the `basis` label.
type GPUBasis string

const (
	// BasisSMUtil: NVML per-process SM utilization samples, time-weighted.
	BasisSMUtil GPUBasis = "sm_util"
	// BasisMemory: the share of device memory a process holds, the fallback
	// where per-process utilization is unsupported (MIG, old GPUs). It
	// says who holds the device, not who keeps it busy.
	BasisMemory GPUBasis = "memory"
	// BasisEngineTime: busy nanoseconds of the DRM client's engines (fdinfo).
	BasisEngineTime GPUBasis = "engine_time"
	// BasisEngineTimeKFD: on an amdgpu card with ROCm (KFD), DRM clients'
	// busy nanoseconds plus each KFD process's occupied share of the
	// compute units (cu_occupancy / CUs) × the interval, in nanoseconds.
	BasisEngineTimeKFD GPUBasis = "engine_time_kfd"
	// BasisNone: no per-process data this interval.
	BasisNone GPUBasis = ""
)

// GPUDevice identifies one GPU (a board, or one DRM card).
type GPUDevice struct {
	// Index is the vendor's index (NVML index; the DRM card number for
	// sysfs devices).
	Index int
	// UUID is NVML's GPU-… UUID; sysfs devices have none and use their PCI
	// address, so Key is stable across reboots either way.
	UUID string
	// Model is the marketing name ("NVIDIA A100-SXM4-40GB") or the PCI
	// device id for sysfs devices ("amdgpu 0x740f").
	Model string
	// PCIBusID is the domain:bus:device.function address, lower case,
	// 4-digit domain ("0000:3b:00.0").
	PCIBusID string
	Vendor   GPUVendor
	// Source is the reader's name ("nvml", "sysfs").
	Source string
}

// Key is the device's stable identity: its UUID, else its PCI address.
func (d GPUDevice) Key() string {
	if d.UUID != "" {
		return d.UUID
	}
	return d.PCIBusID
}

// GPUInstance is one MIG GPU instance in an interval. NVML measures energy
// per board only: Weight apportions the board's dynamic energy among
// instances, then Usage apportions each instance's part among its
// processes.
type GPUInstance struct {
	// ID is the GPU instance id (GI) on its board; Name is "<index>.<gi>",
	// the form nvidia-smi and Slurm order maps use.
	ID   int
	Name string
	UUID string
	// SMs is the instance's multiprocessor count.
	SMs int
	// Weight is the instance's activity in the interval (GPM SM activity ×
	// SMs where available, else SMs while it runs processes, else 0).
	Weight float64
	// WeightBasis is "gpm_sm_util" or "sm_share".
	WeightBasis string
	// Usage is pid → weight within the instance; Basis says what it is.
	Usage map[int]float64
	Basis GPUBasis
}

// GPUReading is one device's validated data for one interval.
type GPUReading struct {
	Device GPUDevice
	// OK is false when this interval's energy could not be read or was
	// rejected; EnergyJ is then 0 and must not be credited.
	OK bool
	// EnergyJ is the validated energy increase over Interval, joules.
	EnergyJ float64
	Method  GPUMethod
	// Interval is the time since the previous reading of this device.
	Interval time.Duration
	// PowerW is the mean power over the interval (EnergyJ / Interval), or
	// the validated power reading for PowerIntegrated.
	PowerW float64
	// Utilization is the device's busy fraction, 0..1 (NVML GPU
	// utilization; the busiest engine's share of the interval for DRM).
	Utilization float64
	// UtilizationKnown is false when the source could not measure the
	// device's utilization this interval (NVML has none for a MIG board;
	// an amdgpu card without gpu_busy_percent, whose ROCm work DRM fdinfo
	// does not see). Utilization is then 0 and means nothing: an interval
	// of unknown utilization never teaches the idle model.
	UtilizationKnown bool
	// Usage is pid → weight on the device for the interval; Basis says
	// what the weights are. Under MIG it is empty and Instances hold it.
	Usage     map[int]float64
	Basis     GPUBasis
	Instances []GPUInstance
	// UsageUnknown: the source could not read who used the device this
	// interval (a per-process call failed, fdinfo unreadable, ROCm work
	// it cannot attribute), so an empty Usage says nothing of whether the
	// device was used. The zero value, known, is what a source that read
	// its processes reports.
	UsageUnknown bool
}

// HolderKind is a device holder's kind, the `kind` label of the allocation
// series.
type HolderKind string

const (
	HolderSlurmJob HolderKind = "slurm"
	HolderPod      HolderKind = "pod"
	HolderVM       HolderKind = "vm"
)

// Holder is who holds a device, as an allocation source names it (the loop
// publishes it as a GPUHolder).
type Holder struct {
	Kind HolderKind
	// JobID for Slurm.
	JobID string
	// Namespace, Pod and Container for Kubernetes.
	Namespace, Pod, Container string
	// VMName and VMUUID for libvirt.
	VMName, VMUUID string
}

// HeldGPUReading is one device's interval: its reading and its holders.
type HeldGPUReading struct {
	Reading GPUReading
	// Holders are who hold the device, sorted (several when it is shared:
	// time-slicing replicas, MPS, Slurm shards, vGPU mdevs); Holder is
	// the first and HasHolder says there is one.
	Holders   []Holder
	Holder    Holder
	HasHolder bool
	// Whole: the holder owns the device outright (PCI passthrough), so
	// all its energy is the holder's.
	Whole bool
	// InstanceHolders holds MIG instances' holders by instance name,
	// sorted as Holders.
	InstanceHolders map[string][]Holder
}

// GPUInterval is all GPUs' data for one interval.
type GPUInterval struct {
	Devices []HeldGPUReading
	Health  []SourceHealth
}
