package power

import (
	"time"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// A meter's optional abilities, asked for by these names (a type assertion
// on the Meter) by the stats loop and the exporter. io.Closer is the fourth:
// meters holding descriptors, sessions or goroutines implement it.

// IdleModeler is implemented by meters that know a zone's idle power (the
// estimator's model has it built in); configuration still overrides it.
type IdleModeler interface {
	IdleWatts(zone string) (float64, bool)
}

// Advancer is implemented by meters that estimate from utilization: the
// loop tells them each interval's utilization before it reads them.
type Advancer interface {
	Advance(util float64, dt time.Duration)
}

// HealthReporter is implemented by meters that report the health of the
// sources behind them; a combined meter reports every member.
type HealthReporter interface {
	Health() []snapshot.SourceHealth
}

// EstimateReporter is implemented by meters that model rather than
// measure: each modelled zone's current power with its band and what the
// model was built from. A combined meter reports every member's.
type EstimateReporter interface {
	Estimates() []snapshot.Estimate
}
