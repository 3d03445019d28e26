package power

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// A meter's optional abilities are the snapshot's (see reading.Meter), so
// the stats loop asks for them without importing this package; the names
// stay here for the meters and the exporter. A meter that reports its
// sources' health implements sourcehealth.Reporter.
type (
	IdleModeler      = reading.IdleModeler
	Advancer         = reading.Advancer
	EstimateReporter = reading.EstimateReporter
	ReadWithin       = reading.ReadWithin
	ZoneEnder        = reading.ZoneEnder
)
