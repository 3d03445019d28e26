package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// IntensitySource is the carbon intensity the emissions stage prices
// energy at; *carbon.Chain implements it. Factor must only read a cache:
// it runs in every interval.
type IntensitySource interface {
	Factor() (reading.CarbonFactor, bool)
	Intensities() []reading.Intensity
	Health() []reading.SourceHealth
}

// WithEmissions prices every joule credited to a consumer, and every
// joule of the node's zones, at the factor in force in its interval.
func WithEmissions(src IntensitySource) Option {
	return func(o *parts) { o.intensity = src }
}

// pricedJ is how much of a zone's cumulative energy has been priced.
type pricedJ struct{ dynamic, idle, unattributed float64 }

// emissions is the stage that turns energy into grams of CO2e. begin fixes
// one factor for the interval before any energy is split, so every share
// of that interval's energy, the consumers' and the node's, is priced
// alike (hence Σ consumers + idle + unattributed = node, as for joules),
// and a factor that arrives later never re-prices energy already priced.
// It sees the consumers' and workloads' joules as they are credited
// (creditWatcher) and the node's zones as the stages before it publish
// them, so it reads no other stage's state.
type emissions struct {
	phases
	src    IntensitySource
	log    *zap.Logger
	f      reading.CarbonFactor
	ok     bool
	warned bool
	// priced is per zone the cumulative energy already priced: the node's
	// grams grow by the zone's growth, which also covers the derived
	// zone "other" that no split sees.
	priced map[seriesKey]pricedJ
	// grams are each zone's grams so far.
	grams map[seriesKey][]snapshot.NodeGrams
}

func makeEmissions(d *deps) (stage, error) {
	if d.opts.intensity == nil {
		return nil, nil
	}
	return &emissions{src: d.opts.intensity, log: d.log,
		priced: map[seriesKey]pricedJ{}, grams: map[seriesKey][]snapshot.NodeGrams{}}, nil
}

// begin fixes the factor in force for this interval, unless the step
// prices at the previous one (keepFactor).
func (e *emissions) begin(iv *interval) {
	if !iv.keepFactor {
		e.adopt()
	}
}

// adopt takes the factor in force now. Without any factor yet (a network
// provider not answered since start-up, no fallback) the interval's
// energy is priced nowhere, neither for consumers nor node.
func (e *emissions) adopt() {
	e.f, e.ok = e.src.Factor()
	if !e.ok && !e.warned {
		e.warned = true
		e.log.Warn("no carbon intensity yet: energy is not priced until a provider answers")
	}
}

// changed reports whether the factor in force differs from the one fixed
// at the last step (another provider, zone or value): the on-demand loop
// then steps, so that no more energy is priced at the wrong one.
func (e *emissions) changed() bool {
	f, ok := e.src.Factor()
	if ok != e.ok {
		return true
	}
	return ok && (f.Provider != e.f.Provider || f.Zone != e.f.Zone || f.GramsPerKWh != e.f.GramsPerKWh)
}

// creditedConsumer prices a consumer's share of one zone's energy.
func (e *emissions) creditedConsumer(w *consumer, zone string, dynamicJ, idleJ float64) {
	e.creditedWorkload(&w.f, zone, dynamicJ, idleJ)
}

// creditedWorkload prices energy paid to a workload directly (a GPU
// holder's): grams = joules × factor at every level.
func (e *emissions) creditedWorkload(f *figures, zone string, dynamicJ, idleJ float64) {
	if !e.ok {
		return
	}
	f.Grams = f.Grams.Add(e.f.Provider, zone, e.f.Grams(dynamicJ), e.f.Grams(idleJ))
}

// price adds to grams, under the interval's provider, the grams of a
// zone's growth since it was last priced.
func (e *emissions) price(id seriesKey, now pricedJ, grams []snapshot.NodeGrams) []snapshot.NodeGrams {
	p := e.priced[id]
	e.priced[id] = now
	if !e.ok {
		return grams
	}
	d, i, u := max(now.dynamic-p.dynamic, 0), max(now.idle-p.idle, 0), max(now.unattributed-p.unattributed, 0)
	if d == 0 && i == 0 && u == 0 {
		return grams
	}
	k := 0
	for ; k < len(grams) && grams[k].Provider < e.f.Provider; k++ {
	}
	if k == len(grams) || grams[k].Provider != e.f.Provider {
		grams = append(grams, snapshot.NodeGrams{})
		copy(grams[k+1:], grams[k:])
		grams[k] = snapshot.NodeGrams{Provider: e.f.Provider}
	}
	grams[k].DynamicG += e.f.Grams(d)
	grams[k].IdleG += e.f.Grams(i)
	grams[k].UnattributedG += e.f.Grams(u)
	return grams
}

// publish prices each zone's growth in this interval, every zone the
// stages before it published (the meter's, the derived "other", the
// GPUs'), at the interval's factor, and gives the snapshot its own copy of
// their grams and the providers' factors and health.
func (e *emissions) publish(_ *interval, s *snapshot.Snapshot) {
	for i := range s.Zones {
		z := &s.Zones[i]
		k := keyOf(z)
		g := e.price(k, pricedJ{z.DynamicJ, z.IdleJ, z.UnattributedJ}, e.grams[k])
		e.grams[k] = g
		z.Grams = append([]snapshot.NodeGrams(nil), g...)
	}
	s.Intensities = e.src.Intensities()
	s.Carbon = e.src.Health()
}
