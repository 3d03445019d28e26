package stats

import (
	"context"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// The loop's two mandatory sources and the meter's optional abilities,
// declared here where they are consumed: a source implements them by
// their methods, without importing this package, and the loop asks for
// them without importing any source. The other sources' interfaces stand
// beside the stages that read them (ProbeSource, Profiler, GPUSource,
// IntensitySource, WorkloadResolver, ResourceReader, DropReporter).
// cmd/exporter/seams.go checks at compile time that pkg/power's own
// declarations of the meter and its abilities satisfy these.

// Accounting is the per-task CPU accounting source (internal/bpfloader, or
// internal/procfs in fallback mode), read once per step.
type Accounting interface {
	Read() (reading.Usage, error)
	// Mode is "bpf" or "procfs".
	Mode() string
}

// Meter is the node's energy source (pkg/power's meters, combined or
// not). The loop reads it from its own goroutine.
type Meter interface {
	// Name identifies the meter ("rapl", "estimator"); it becomes the
	// zones' source.
	Name() string
	// Estimated reports whether the figures are modelled rather than
	// measured.
	Estimated() bool
	// Read returns cumulative energy per zone since the first Read; the
	// first returns 0 J for every zone. ctx carries the step's deadline.
	Read(ctx context.Context) ([]reading.ZoneSample, error)
}

// HealthReporter is implemented by whatever reports the health of the
// sources behind it: the meter (a combined one reports every member), the
// CPU accounting, the cgroup reader. The health stage publishes it.
type HealthReporter interface {
	Health() []reading.SourceHealth
}

// IdleModeler is implemented by meters that know a zone's idle power (the
// estimator's model); configuration still overrides it.
type IdleModeler interface {
	IdleWatts(zone string) (float64, bool)
}

// ZoneEnder is implemented by meters that may stop reporting a zone on
// purpose: EndedZones lists the zones whose series end now.
type ZoneEnder interface {
	EndedZones() []reading.ZoneID
}

// Advancer is implemented by meters that estimate from utilization: the
// loop tells them each interval's utilization before it reads them.
type Advancer interface {
	Advance(util float64, dt time.Duration)
}

// EstimateReporter is implemented by meters that model rather than
// measure: each modelled zone's power with its band.
type EstimateReporter interface {
	Estimates() []reading.Estimate
}

// ReadWithin is implemented by meters whose counters wrap: the longest
// they may go unread before a wrap could go unnoticed; 0 means no limit.
// The loop reads the meter at least this often.
type ReadWithin interface {
	ReadWithin() time.Duration
}

// CombinedMeter is a meter made of members (pkg/power's Combined), each
// with its own source name and method: SourceEstimated says whether the
// member named source is a model (ok false when no member bears the
// name), so measured RAPL zones next to an estimated platform are
// labelled as what they are.
type CombinedMeter interface {
	SourceEstimated(source string) (estimated, ok bool)
}
