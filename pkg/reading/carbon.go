package reading

import "time"

// JoulesPerKWh converts energy: 1 kWh = 3.6 MJ.
const JoulesPerKWh = 3.6e6

// CarbonFactor is the carbon-intensity factor in force for one interval:
// the one every joule credited in that interval is multiplied by.
type CarbonFactor struct {
	// Provider and Zone say where it came from; Provider is the value of
	// the emissions counters' `provider` label.
	Provider, Zone string
	GramsPerKWh    float64
	Age            time.Duration
	// Fallback is set when the driving provider was passed over because
	// it had no value or was older than the staleness.
	Fallback bool
}

// Grams is the mass of CO2e for joules at this factor.
func (f CarbonFactor) Grams(joules float64) float64 { return joules / JoulesPerKWh * f.GramsPerKWh }
