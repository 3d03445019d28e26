package power

import (
	"io"
)

// The meters and the abilities each offers (abilities.go), checked at
// compile time: the stats loop finds an ability by type assertion, so a
// method renamed or lost would otherwise drop the ability silently.
var (
	_ Meter = (*PerfRAPL)(nil)
	_ Meter = (*PMCounters)(nil)
	_ Meter = (*Cached)(nil)
	_ Meter = (*Retrying)(nil)
	_ Meter = (*Combined)(nil)

	_ IdleModeler      = (*Estimator)(nil)
	_ IdleModeler      = (*Combined)(nil)
	_ Advancer         = (*Estimator)(nil)
	_ Advancer         = (*Combined)(nil)
	_ EstimateReporter = (*Estimator)(nil)
	_ EstimateReporter = (*Combined)(nil)

	_ io.Closer = (*PerfRAPL)(nil)
	_ io.Closer = (*Cached)(nil)
	_ io.Closer = (*Retrying)(nil)
	_ io.Closer = (*Combined)(nil)

	_ PowerReader = (*Hwmon)(nil)
)
