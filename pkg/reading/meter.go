package reading

// What a power meter hands the stats loop: its zones' cumulative energy.
// pkg/power's meters produce it; the loop reads it without importing any
// meter. The Meter interface and its optional abilities are declared where
// they are consumed (pkg/power, internal/stats).

// ZoneSample is one zone's cumulative energy since the meter's first Read.
type ZoneSample struct {
	Zone   string  // "package", "core", "uncore", "dram", "psys", "gpu", "platform"
	Socket int     // package (or GPU) index; -1 for node-wide zones (psys, platform, the estimator)
	Joules float64 // cumulative, wraparound-corrected, never decreases
	// Source names the meter that measured this zone when it differs from
	// the meter's own Name (a Combine of several meters sets it on every
	// sample); empty means the meter's Name().
	Source string
	// Method is "measured" or "estimated" when the meter knows it per
	// zone (a host's share, where the host may have measured one zone and
	// estimated another); empty means the source's, as the meter's
	// Estimated (or a combined meter's member's) says.
	Method string
}

// Methods a ZoneSample may carry.
const (
	MethodMeasured  = "measured"
	MethodEstimated = "estimated"
)

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
