package power

// ZoneSample is one zone's cumulative energy since the meter's first Read.
type ZoneSample struct {
	Zone   string  // "package", "core", "uncore", "dram", "psys", "gpu", "platform"
	Socket int     // package (or GPU) index; -1 for node-wide zones (psys, platform, the estimator)
	Joules float64 // cumulative, wraparound-corrected, never decreases
	// Source names the meter that measured this zone when it differs from
	// the Meter's own Name (a Combine of several meters sets it on every
	// sample); empty means Meter.Name().
	Source string
}

// Meter is a source of node energy. Implementations are safe for
// concurrent use.
type Meter interface {
	// Name identifies the meter ("rapl", "estimator"); it becomes the
	// `source` label on exported metrics.
	Name() string
	// Estimated reports whether the figures are modelled rather than
	// measured, so exporters can label them honestly.
	Estimated() bool
	// Read returns cumulative energy per zone since the first Read. The
	// first Read returns 0 J for every zone.
	Read() ([]ZoneSample, error)
}

// Zone names used in ZoneSample.Zone.
const (
	ZonePackage = "package"
	ZoneCore    = "core"
	ZoneUncore  = "uncore"
	ZoneDRAM    = "dram"
	ZonePsys    = "psys"
	// ZoneGPU is a discrete accelerator's own draw (Socket = its index),
	// outside the CPU package.
	ZoneGPU = "gpu"
	// ZonePlatform is the whole node as its BMC or board meter sees it
	// (fans, disks, NICs, PSU loss, often GPUs included); Socket is -1.
	ZonePlatform = "platform"
)

// Compile-time checks that both meters satisfy Meter.
var (
	_ Meter = (*RAPL)(nil)
	_ Meter = (*Estimator)(nil)

	_ ReadWithin = (*RAPL)(nil)
	_ ReadWithin = (*Combined)(nil)
)
