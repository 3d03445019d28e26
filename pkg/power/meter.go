package power

// ZoneSample is one zone's cumulative energy since the meter's first Read.
type ZoneSample struct {
	Zone   string  // "package", "core", "uncore", "dram", "psys"
	Socket int     // package index; -1 for node-wide zones (psys, the estimator)
	Joules float64 // cumulative, wraparound-corrected, never decreases
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
)

// Compile-time checks that both meters satisfy Meter.
var (
	_ Meter = (*RAPL)(nil)
	_ Meter = (*Estimator)(nil)
)
