package power

// Compile-time checks that both meters satisfy Meter.
var (
	_ Meter = (*RAPL)(nil)
	_ Meter = (*Estimator)(nil)

	_ ReadWithin = (*RAPL)(nil)
	_ ReadWithin = (*Combined)(nil)
)
