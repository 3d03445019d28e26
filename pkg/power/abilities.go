package power

import (
	"context"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Meter is a source of node energy, as this package's wrappers (Combine,
// Cached, Retrying), the meter table (pkg/power/discover) and
// internal/compose take one. Implementations are safe for concurrent use. The
// stats loop declares the same methods as its own stats.Meter, so it
// reads meters without importing this package.
type Meter interface {
	// Name identifies the meter ("rapl", "estimator"); it becomes the
	// `source` label on exported metrics.
	Name() string
	// Estimated reports whether the figures are modelled rather than
	// measured, so exporters can label them honestly.
	Estimated() bool
	// Read returns cumulative energy per zone since the first Read. The
	// first Read returns 0 J for every zone. ctx bounds a read that may
	// block (a file on a hung mount, a host's share over vsock); it must
	// return soon after ctx is done, with ctx's error. A meter that never
	// blocks (RAPL's sysfs counters, the estimator, Cached's figures) may
	// ignore it.
	Read(ctx context.Context) ([]reading.ZoneSample, error)
}

// A meter's optional abilities, asked for by a type assertion on the
// Meter. A combined meter forwards each to the members that have it, and
// the stats loop and measure ask for them under their own names.
// io.Closer is another: meters holding descriptors, sessions or
// goroutines implement it.

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
	EndedZones() []reading.ZoneID
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
	Estimates() []reading.Estimate
}

// ReadWithin is implemented by meters whose counters wrap: ReadWithin is
// the longest they may go unread before a wrap could go unnoticed (two
// wraps between reads look like one), with a margin; 0 means no limit.
// The stats loop, which otherwise steps only when asked, reads the meter
// at least this often.
type ReadWithin interface {
	ReadWithin() time.Duration
}

// HealthReporter is implemented by meters that report the health of the
// sources behind them (a combined meter reports every member's).
type HealthReporter interface {
	Health() []reading.SourceHealth
}
