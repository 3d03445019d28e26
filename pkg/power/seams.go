package power

import (
	"github.com/wattrace/wattrace/pkg/reading"
	"io"
)

// The meters and the abilities each offers (abilities.go), checked at
// compile time: the stats loop finds an ability by type assertion, so a
// method renamed or lost would otherwise drop the ability silently.
var (
	_ reading.Meter = (*PerfRAPL)(nil)
	_ reading.Meter = (*PMCounters)(nil)
	_ reading.Meter = (*Cached)(nil)
	_ reading.Meter = (*Retrying)(nil)
	_ reading.Meter = (*Combined)(nil)

	_ reading.IdleModeler      = (*Estimator)(nil)
	_ reading.IdleModeler      = (*Combined)(nil)
	_ reading.Advancer         = (*Estimator)(nil)
	_ reading.Advancer         = (*Combined)(nil)
	_ reading.EstimateReporter = (*Estimator)(nil)
	_ reading.EstimateReporter = (*Combined)(nil)

	_ io.Closer = (*PerfRAPL)(nil)
	_ io.Closer = (*Cached)(nil)
	_ io.Closer = (*Retrying)(nil)
	_ io.Closer = (*Combined)(nil)

	_ PowerReader = (*Hwmon)(nil)
)
