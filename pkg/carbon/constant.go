package carbon

import (
	"context"
)

// DefaultGramsPerKWh is the world average carbon intensity of electricity
// generation in 2022: 436 gCO2/kWh, Ember, Global Electricity Review 2023
// (https://ember-climate.org/insights/research/global-electricity-review-2023/,
// CC BY 4.0). It is the factor when nothing better is configured, so that
// grams appear out of the box, labelled provider="constant".
const DefaultGramsPerKWh = 436

// Constant is a configured factor that never changes.
type Constant struct {
	GramsPerKWh float64
	// ZoneName labels it; "world" by default.
	ZoneName string
}

// Name implements Fetcher.
func (c Constant) Name() string { return "constant" }

// Zone implements Fetcher.
func (c Constant) Zone() string {
	if c.ZoneName == "" {
		return "world"
	}
	return c.ZoneName
}

// Fetch implements Fetcher.
func (c Constant) Fetch(context.Context) (Sample, error) {
	return Sample{GramsPerKWh: c.GramsPerKWh}, nil
}

func (Constant) fixed() {}
