package reading

// Estimate is a modelled zone's power at the end of the interval, with the
// band the model's fit says the true value lies in, and what the model
// was built from. Only zones a model estimates have one.
type Estimate struct {
	ZoneID
	// Source is the meter ("estimator").
	Source string
	// Watts is the estimate; LowerW and UpperW bound it (the fit's
	// residual quantiles, see docs/meters.md).
	Watts, LowerW, UpperW float64
	// Curve is the kind of curve: "server" (whole-server wall power),
	// "package" (CPU packages) or "vm" (a VM's vCPUs).
	Curve string
	// Tier says how much the model knew of the CPU: "cpu" (its TDP and
	// architecture), "arch" (its microarchitecture), "generic" (neither),
	// or "configuration" (figures set by the operator).
	Tier string
	// CPU is the normalised CPU model the model looked up; Arch the
	// microarchitecture row it matched ("" for none).
	CPU, Arch string
	// Coefficients names the coefficients' source.
	Coefficients string
}
