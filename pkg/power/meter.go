package power

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// ZoneSample and Meter are the snapshot's: the stats loop reads meters
// without importing this package.
type (
	ZoneSample = reading.ZoneSample
	Meter      = reading.Meter
)

// Zone names used in ZoneSample.Zone.
const (
	ZonePackage  = reading.ZonePackage
	ZoneCore     = reading.ZoneCore
	ZoneUncore   = reading.ZoneUncore
	ZoneDRAM     = reading.ZoneDRAM
	ZonePsys     = reading.ZonePsys
	ZoneGPU      = reading.ZoneGPU
	ZonePlatform = reading.ZonePlatform
)

// Compile-time checks that both meters satisfy Meter.
var (
	_ Meter = (*RAPL)(nil)
	_ Meter = (*Estimator)(nil)

	_ ReadWithin = (*RAPL)(nil)
	_ ReadWithin = (*Combined)(nil)
)
