package power

import "github.com/wattrace/wattrace/pkg/snapshot"

// A meter's optional abilities are the snapshot's (see snapshot.Meter), so
// the stats loop asks for them without importing this package; the names
// stay here for the meters and the exporter. A meter that reports its
// sources' health implements sourcehealth.Reporter.
type (
	IdleModeler      = snapshot.IdleModeler
	Advancer         = snapshot.Advancer
	EstimateReporter = snapshot.EstimateReporter
	ReadWithin       = snapshot.ReadWithin
	ZoneEnder        = snapshot.ZoneEnder
)
