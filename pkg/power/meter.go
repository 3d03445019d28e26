package power

import "github.com/wattrace/wattrace/pkg/snapshot"

// ZoneSample and Meter are the snapshot's: the stats loop reads meters
// without importing this package.
type (
	ZoneSample = snapshot.ZoneSample
	Meter      = snapshot.Meter
)

// Zone names used in ZoneSample.Zone.
const (
	ZonePackage  = snapshot.ZonePackage
	ZoneCore     = snapshot.ZoneCore
	ZoneUncore   = snapshot.ZoneUncore
	ZoneDRAM     = snapshot.ZoneDRAM
	ZonePsys     = snapshot.ZonePsys
	ZoneGPU      = snapshot.ZoneGPU
	ZonePlatform = snapshot.ZonePlatform
)

// Compile-time checks that both meters satisfy Meter.
var (
	_ Meter = (*RAPL)(nil)
	_ Meter = (*Estimator)(nil)

	_ ReadWithin = (*RAPL)(nil)
	_ ReadWithin = (*Combined)(nil)
)
