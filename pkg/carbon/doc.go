// Package carbon provides carbon-intensity factors (grams of CO2-equivalent
// per kWh) and turns credited energy into grams.
//
// A Provider wraps one source of factors (a constant, an embedded country
// table, RTE eco2mix, Electricity Maps, WattTime). Network sources are read
// in the background, each with its own refresh period and timeout; readers
// only ever see the cache, so nothing waits on a slow API. Every value
// passes reading.CheckGauge: a negative, non-finite or absurd value (above
// MaxGramsPerKWh) or an unparseable answer is rejected, counted by reason
// and never replaces the last good value, which stays visible with its age.
//
// A Chain orders the providers: the configured one drives the integration
// and the fallbacks take over, in order, once it is older than the
// configured staleness. The stats loop's emissions stage prices each
// interval's joules with the factor in force for that interval
// (Factor.Grams), so that Σ workloads + idle = node holds for grams
// exactly as it does for joules.
//
// Package layout: one file per provider, chain.go for the choice of the
// factor in force, config.go for the keys under `emissions.`.
package carbon
