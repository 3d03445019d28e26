package carbon

import (
	"context"
	"sync"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Grams is the mass of CO2e for joules of electricity at gPerKWh.
func Grams(joules, gPerKWh float64) float64 { return joules / reading.JoulesPerKWh * gPerKWh }

// Chain picks the factor in force: the driving provider's while it is no
// older than the staleness, else the first fallback, in the configured
// order, that is. When every one is stale it keeps the freshest value
// rather than none: a stale factor is a better estimate than no grams.
type Chain struct {
	providers []*Provider
	staleness time.Duration
}

// NewChain orders the providers: the driving one first, then the
// fallbacks. A staleness of zero or less never falls back for age.
func NewChain(staleness time.Duration, driver *Provider, fallbacks ...*Provider) *Chain {
	return &Chain{providers: append([]*Provider{driver}, fallbacks...), staleness: staleness}
}

// Providers returns the chain's providers, driver first.
func (c *Chain) Providers() []*Provider { return append([]*Provider(nil), c.providers...) }

// Factor returns the factor in force now; ok is false only when no
// provider has ever had a good value (then nothing can be credited).
func (c *Chain) Factor() (f reading.CarbonFactor, ok bool) {
	var best Value
	found := false
	for i, p := range c.providers {
		v, has := p.Current()
		if !has {
			continue
		}
		if c.staleness <= 0 || v.Age <= c.staleness {
			return factorOf(v, i > 0), true
		}
		if !found || v.Age < best.Age {
			best, found = v, true
		}
	}
	if !found {
		return reading.CarbonFactor{}, false
	}
	return factorOf(best, best.Provider != c.providers[0].Name()), true
}

func factorOf(v Value, fallback bool) reading.CarbonFactor {
	return reading.CarbonFactor{Provider: v.Provider, Zone: v.Zone, GramsPerKWh: v.GramsPerKWh, Age: v.Age, Fallback: fallback}
}

// Intensities is every provider's cached factor, for the snapshot; a
// provider without a good value yet is left out (its health says why).
func (c *Chain) Intensities() []reading.Intensity {
	out := make([]reading.Intensity, 0, len(c.providers))
	for _, p := range c.providers {
		if in, ok := p.Intensity(); ok {
			out = append(out, in)
		}
	}
	return out
}

// Health is every provider's health, source "carbon/<name>".
func (c *Chain) Health() []reading.SourceHealth {
	out := make([]reading.SourceHealth, 0, len(c.providers))
	for _, p := range c.providers {
		out = append(out, p.Health())
	}
	return out
}

// Run reads every provider in the background, each on its own period,
// until ctx ends; it returns when they have all stopped.
func (c *Chain) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for _, p := range c.providers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Run(ctx)
		}()
	}
	wg.Wait()
}
