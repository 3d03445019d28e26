package snapshot

import "time"

// GPU is one GPU device's cumulative figures. The device is also a zone
// (ZoneGPU, Socket = its place among the stage's devices) in
// Snapshot.Zones; this record carries what a
// zone has no room for: its identity, how its energy was read, who holds
// it and the energy of each process that used it. Joule fields are
// cumulative since the exporter started and never decrease.
type GPU struct {
	Index    int
	UUID     string // NVML's GPU-… UUID, else the PCI address
	Model    string
	PCIBusID string
	Vendor   string // nvidia, amd, intel
	Source   string // nvml, sysfs
	// Method is how the latest interval's energy was read: "counter" or
	// "power_integrated".
	Method string
	// Basis is what the latest interval's per-process split was by:
	// sm_util, memory, engine_time, or "" when no process used it.
	Basis string

	// EnergyJ = IdleJ + DynamicJ; UnattributedJ is the part of DynamicJ no
	// process used (no process had a positive weight).
	EnergyJ, IdleJ, DynamicJ, UnattributedJ float64
	// HolderJ is the part of EnergyJ credited to the allocation holder:
	// the idle energy under gpu.idle-policy=holder, everything for a GPU
	// passed through to a VM. It is a view of the same joules, not extra.
	HolderJ float64
	// PowerW is the mean power over the latest interval; Utilization the
	// device's busy fraction (0..1) as its source last reported it, NaN
	// when the source cannot measure it (a MIG board, an amdgpu card
	// without gpu_busy_percent).
	PowerW, Utilization float64
	// IdleClamps counts intervals where the idle model exceeded the
	// measured energy and idle was clamped to it.
	IdleClamps uint64
	// Holder is who holds the device now (nil when nobody does): the first
	// of Holders.
	Holder *GPUHolder
	// Holders are every holder of the whole device, sorted by their
	// labels: several when it is shared (time-slicing replicas, MPS,
	// Slurm shards, vGPU mdevs), who then share its idle evenly.
	Holders []GPUHolder
	// InstanceHolders are the holders of the board's MIG instances
	// (Instance set), for the allocation series. The board's dynamic
	// energy goes to instances' processes; under the holder policy its
	// idle is divided among instances by SMs and paid to their holders.
	InstanceHolders []GPUHolder
	// Processes are the processes that used the device, alive or within
	// retention.
	Processes []GPUProcess
}

// GPUHolder is who holds a GPU: a Slurm job, a pod's container or a VM.
type GPUHolder struct {
	Kind                      string // slurm, pod, vm
	JobID                     string
	Namespace, Pod, Container string
	VM, VMUUID                string
	// Whole: the device is passed through to the holder.
	Whole bool
	// Instance is the MIG instance held ("<index>.<gi>"), "" for the
	// whole device.
	Instance string
	// IdleObservable: the host can see the holder's processes, so whether
	// it uses the device can be told and IdleRatio is published. False
	// for VMs: their processes run in the guest.
	IdleObservable bool
	// IdleRatio is the fraction of the latest interval in which the
	// holder held the device (or its instance) and none of its processes
	// used it (docs/gpu.md, "GPUs held but idle"): 1 or 0, as the sources
	// report use per interval, not when within it. NaN when it cannot be
	// told this interval (the device was not read, its usage unknown, the
	// first interval) or when IdleObservable is false.
	IdleRatio float64
	// IdleSeconds is the seconds the holder has held the device (or its
	// instance) idle since it was first seen holding it: each interval
	// whose IdleRatio is 1 adds its exact length, one whose ratio is NaN
	// adds nothing. 0 when IdleObservable is false.
	IdleSeconds float64
}

// GPUProcess is one process's cumulative dynamic energy on one GPU.
type GPUProcess struct {
	PID  uint32
	Comm string
	// Cgroup is the process's cgroup path (the key hierarchy's), for its
	// workload labels.
	Cgroup string
	// The workload the process belongs to, where the loop resolves
	// workloads (empty otherwise): a pod's container, a Slurm job, a VM.
	Namespace, Pod, Container, JobID, VM string
	DynamicJ                             float64
	Alive                                bool
	LastSeen                             time.Time
}
