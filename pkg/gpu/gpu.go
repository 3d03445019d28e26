// Package gpu holds what every GPU source reports (a Reading per device and
// interval: energy, method, per-process weights and their basis, MIG
// instances) and the per-device validation that turns raw energy or power
// into a trusted energy increase (Meter). The vendor readers live
// in subpackages: nvml (NVIDIA, cgo), sysfs (amdgpu, i915, xe through hwmon
// and DRM fdinfo) and alloc (who holds a device: Slurm, Kubernetes, libvirt).
//
// Data flows one way: sources produce Readings; the stats loop's GPU stage
// (internal/stats/gpu.go) splits each device's energy with its idle model
// through pkg/model, and the results go into the snapshot.
package gpu

import (
	"context"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Source reads a set of GPUs. It is owned by the stats loop's goroutine.
type Source interface {
	// Name is "nvml" or "sysfs".
	Name() string
	// Devices lists the devices found at Open.
	Devices() []reading.GPUDevice
	// Read returns one Reading per device for the interval ending now.
	// A device that failed has OK false; the error is for the source as a
	// whole (the library or the sysfs root went away).
	Read(ctx context.Context, now time.Time) ([]reading.GPUReading, error)
	// Health reports one SourceHealth per device ("nvml/GPU-…").
	Health() []reading.SourceHealth
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
