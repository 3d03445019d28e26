package reading

import "time"

// SourceHealth is the state of one source of readings: a meter (RAPL, a
// BMC, hwmon), a reader of kernel files, a carbon-intensity provider. Every
// configured source reports one, so a failing source is visible rather
// than silently frozen.
type SourceHealth struct {
	// Source names it: "rapl", "redfish", "cgroupfs", "carbon/rte", ...
	Source string
	// Up is false while the latest attempt to read it failed.
	Up bool
	// Age is the time since its last good reading; 0 for a source read
	// synchronously each interval that has just succeeded.
	Age time.Duration
	// Reads and Errors count read attempts and failed ones.
	Reads, Errors uint64
	// Rejected counts readings refused by validation, by reason (the
	// values of pkg/reading's Reason).
	Rejected map[string]uint64
	// Reason says, in a fixed token, why the source is down or degraded
	// ("nvml_driver_library_mismatch", "fdinfo_no_permission", …); ""
	// while it is fine.
	Reason string
}

// Intensity is one carbon-intensity provider's latest factor for one
// electricity zone.
type Intensity struct {
	Provider string
	// Zone is the provider's zone (a country code, an RTE or WattTime
	// region).
	Zone string
	// GramsPerKWh is grams of CO2-equivalent per kWh.
	GramsPerKWh float64
	// Age is the time since the provider last gave a good value.
	Age time.Duration
	Up  bool
}
