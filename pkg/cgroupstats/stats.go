// Package cgroupstats reads the resource counters HPC users look at for one
// workload cgroup: CPU user/system time, memory usage, limit and failures,
// block IO per device, pressure stall information and the task count. It
// reads cgroup v1 (each controller under its own mount, the same relative
// path under each, as Slurm lays jobs out), cgroup v2, and hybrid hosts that
// have both.
//
// A Read opens a fixed list of files (no directory walks) into buffers the
// Reader keeps, so polling every workload every interval stays cheap.
package cgroupstats

import "github.com/wattrace/wattrace/pkg/snapshot"

// A reading's types are defined in pkg/snapshot, the vocabulary the
// collectors read; this package produces them. The short names below let
// the readers and their tests speak of Stats and Field.
type (
	Stats    = snapshot.Resources
	Field    = snapshot.ResourceField
	Resource = snapshot.PSIResource
	Pressure = snapshot.Pressure
	DeviceIO = snapshot.DeviceIO
)

// The fields and PSI resources, as in pkg/snapshot.
const (
	Unlimited            = snapshot.Unlimited
	CPU                  = snapshot.PSICPU
	Memory               = snapshot.PSIMemory
	IO                   = snapshot.PSIIO
	NumResources         = snapshot.NumPSIResources
	FieldCPU             = snapshot.FieldCPU
	FieldMemoryCurrent   = snapshot.FieldMemoryCurrent
	FieldMemoryLimit     = snapshot.FieldMemoryLimit
	FieldMemoryRSS       = snapshot.FieldMemoryRSS
	FieldMemoryCache     = snapshot.FieldMemoryCache
	FieldMemorySwap      = snapshot.FieldMemorySwap
	FieldMemoryFailCount = snapshot.FieldMemoryFailCount
	FieldMemoryOOMKills  = snapshot.FieldMemoryOOMKills
	FieldIO              = snapshot.FieldIO
	FieldPSICPUSome      = snapshot.FieldPSICPUSome
	FieldPSICPUFull      = snapshot.FieldPSICPUFull
	FieldPSIMemorySome   = snapshot.FieldPSIMemorySome
	FieldPSIMemoryFull   = snapshot.FieldPSIMemoryFull
	FieldPSIIOSome       = snapshot.FieldPSIIOSome
	FieldPSIIOFull       = snapshot.FieldPSIIOFull
	FieldTasks           = snapshot.FieldTasks
	FieldTasksRecursive  = snapshot.FieldTasksRecursive
)
