package reading

import "time"

// The power meters' vocabulary: what a meter hands the stats loop and the
// optional abilities the loop asks a meter for. pkg/power implements it;
// the loop reads it without importing any meter.

// ZoneSample is one zone's cumulative energy since the meter's first Read.
type ZoneSample struct {
	Zone   string  // "package", "core", "uncore", "dram", "psys", "gpu", "platform"
	Socket int     // package (or GPU) index; -1 for node-wide zones (psys, platform, the estimator)
	Joules float64 // cumulative, wraparound-corrected, never decreases
	// Source names the meter that measured this zone when it differs from
	// the Meter's own Name (a Combine of several meters sets it on every
	// sample); empty means Meter.Name().
	Source string
	// Method is "measured" or "estimated" when the meter knows it per
	// zone (a host's share, where the host may have measured one zone and
	// estimated another); empty means the source's, as Meter.Estimated
	// (or a combined meter's member) says.
	Method string
}

// Methods a ZoneSample may carry.
const (
	MethodMeasured  = "measured"
	MethodEstimated = "estimated"
)

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

// ZoneID names one energy zone of the node.
type ZoneID struct {
	Name   string // package, core, uncore, dram, psys, gpu, platform, other
	Socket int    // -1 when the zone is node-wide
}

// Zone names used in ZoneSample.Zone and ZoneID.Name.
const (
	ZonePackage = "package"
	ZoneCore    = "core"
	ZoneUncore  = "uncore"
	ZoneDRAM    = "dram"
	ZonePsys    = "psys"
	// ZoneGPU is a discrete accelerator's own draw, outside the CPU
	// package: the zone of a GPU device. The GPU stage's devices are
	// sockets 0, 1, … in the order of its sources' devices (NVML's, then
	// the DRM cards'); a meter's GPU zones of devices the stage cannot
	// read come after them, so a zone identity is never shared.
	ZoneGPU = "gpu"
	// ZonePlatform is the whole node as its BMC or board meter sees it
	// (fans, disks, NICs, PSU loss, often GPUs included); Socket is -1.
	ZonePlatform = "platform"
)

// A meter's optional abilities, asked for by these names (a type assertion
// on the Meter) by the stats loop and the exporter. io.Closer is another:
// meters holding descriptors, sessions or goroutines implement it. A meter
// that reports the health of the sources behind it implements
// pkg/sourcehealth's Reporter.

// IdleModeler is implemented by meters that know a zone's idle power (the
// estimator's model has it built in); configuration still overrides it.
type IdleModeler interface {
	IdleWatts(zone string) (float64, bool)
}

// ZoneEnder is implemented by meters that may stop reporting a zone on
// purpose: EndedZones lists the zones whose series end now (none of their
// node series is exported until the meter samples the zone again, and then
// the zone's series resume where they stopped). A zone a meter merely
// failed to read is not ended: its counter stays, frozen, so a failing
// source shows.
type ZoneEnder interface {
	EndedZones() []ZoneID
}

// Advancer is implemented by meters that estimate from utilization: the
// loop tells them each interval's utilization before it reads them.
type Advancer interface {
	Advance(util float64, dt time.Duration)
}

// EstimateReporter is implemented by meters that model rather than
// measure: each modelled zone's current power with its band and what the
// model was built from. A combined meter reports every member's.
type EstimateReporter interface {
	Estimates() []Estimate
}

// ReadWithin is implemented by meters whose counters wrap: ReadWithin is
// the longest they may go unread before a wrap could go unnoticed (two
// wraps between reads look like one), with a margin; 0 means no limit.
// The stats loop, which otherwise steps only when asked, reads the meter
// at least this often.
type ReadWithin interface {
	ReadWithin() time.Duration
}
