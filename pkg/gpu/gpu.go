// Package gpu holds what every GPU source reports (a Reading per device and
// interval: energy, method, per-process weights and their basis, MIG
// instances) and the per-device validation that turns raw energy or power
// into a trusted energy increase (Meter). The vendor readers live
// in subpackages: nvml (NVIDIA, cgo), sysfs (amdgpu, i915, xe through hwmon
// and DRM fdinfo) and alloc (who holds a device: Slurm, Kubernetes, libvirt).
//
// Data flows one way: sources produce Readings; the stats loop's GPU stage
// (pkg/stats/gpu.go) splits each device's energy with its idle model
// through pkg/model, and the results go into the snapshot.
package gpu

import (
	"context"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// Vendor names a GPU maker, the `vendor` of a Device.
type Vendor string

const (
	NVIDIA Vendor = "nvidia"
	AMD    Vendor = "amd"
	Intel  Vendor = "intel"
)

// Method says how a device's energy was obtained: the `method` label.
type Method string

const (
	// Counter: the device's own cumulative energy counter (NVML
	// GetTotalEnergyConsumption in mJ, i915/xe hwmon energy1_input in µJ).
	Counter Method = "counter"
	// PowerIntegrated: instantaneous or averaged power (NVML GetPowerUsage,
	// amdgpu power1_average/power1_input) times the interval. On NVIDIA
	// Ampere (except GA100) and newer GetPowerUsage is a 1 s average, and
	// amdgpu's power1_average is the SMU's own running average, so an
	// interval's energy lags a load step by up to that window.
	PowerIntegrated Method = "power_integrated"
)

// Basis says what per-process weights measure: the `basis` label.
type Basis string

const (
	// SMUtil: NVML per-process SM utilization samples, time-weighted.
	SMUtil Basis = "sm_util"
	// Memory: the share of device memory a process holds, the fallback
	// where per-process utilization is unsupported (MIG, old GPUs). It
	// says who holds the device, not who keeps it busy.
	Memory Basis = "memory"
	// EngineTime: busy nanoseconds of the DRM client's engines (fdinfo).
	EngineTime Basis = "engine_time"
	// EngineTimeKFD: on an amdgpu card with ROCm (KFD), DRM clients'
	// busy nanoseconds plus each KFD process's occupied share of the
	// compute units (cu_occupancy / CUs) × the interval, in nanoseconds.
	EngineTimeKFD Basis = "engine_time_kfd"
	// None: no per-process data this interval.
	None Basis = ""
)

// Device identifies one GPU (a board, or one DRM card).
type Device struct {
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
	Vendor   Vendor
	// Source is the reader's name ("nvml", "sysfs").
	Source string
}

// Key is the device's stable identity: its UUID, else its PCI address.
func (d Device) Key() string {
	if d.UUID != "" {
		return d.UUID
	}
	return d.PCIBusID
}

// Instance is one MIG GPU instance in an interval. NVML measures energy
// per board only: Weight apportions the board's dynamic energy among
// instances, then Usage apportions each instance's part among its
// processes.
type Instance struct {
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
	Basis Basis
}

// Reading is one device's validated data for one interval.
type Reading struct {
	Device Device
	// OK is false when this interval's energy could not be read or was
	// rejected; EnergyJ is then 0 and must not be credited.
	OK bool
	// EnergyJ is the validated energy increase over Interval, joules.
	EnergyJ float64
	Method  Method
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
	Basis     Basis
	Instances []Instance
}

// Source reads a set of GPUs. It is owned by the stats loop's goroutine.
type Source interface {
	// Name is "nvml" or "sysfs".
	Name() string
	// Devices lists the devices found at Open.
	Devices() []Device
	// Read returns one Reading per device for the interval ending now.
	// A device that failed has OK false; the error is for the source as a
	// whole (the library or the sysfs root went away).
	Read(ctx context.Context, now time.Time) ([]Reading, error)
	// Health reports one SourceHealth per device ("nvml/GPU-…").
	Health() []snapshot.SourceHealth
	Close() error
}

// NormPCI writes a PCI address the one way devices and allocations compare
// it: lower case with a 4-digit domain ("00000000:3B:00.0", NVML's form,
// becomes "0000:3b:00.0"). Anything that does not look like an address is
// returned lower-cased.
func NormPCI(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !strings.Contains(rest, ":") {
		return s
	}
	if len(dom) > 4 {
		dom = dom[len(dom)-4:]
	}
	for len(dom) < 4 {
		dom = "0" + dom
	}
	return dom + ":" + rest
}
