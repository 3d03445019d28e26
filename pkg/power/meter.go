package power

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// Compile-time checks that both meters satisfy Meter.
var (
	_ reading.Meter = (*RAPL)(nil)
	_ reading.Meter = (*Estimator)(nil)

	_ reading.ReadWithin = (*RAPL)(nil)
	_ reading.ReadWithin = (*Combined)(nil)
)
