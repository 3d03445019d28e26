package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/snapshot"
)

// IntensitySource is the carbon intensity the emissions stage prices
// energy at; *carbon.Chain implements it. Factor must only read a cache:
// it runs in every interval.
type IntensitySource interface {
	Factor() (carbon.Factor, bool)
	Intensities() []snapshot.Intensity
	Health() []snapshot.SourceHealth
}

// WithEmissions prices every joule credited to a consumer, and every
// joule of the node's zones, at the factor in force in its interval.
func WithEmissions(src IntensitySource) Option {
	return func(l *Loop) {
		l.emissions = &emissions{src: src, log: l.log, priced: map[snapshot.ZoneID]pricedJ{}}
	}
}

// pricedJ is how much of a zone's cumulative energy has been priced.
type pricedJ struct{ dynamic, idle, unattributed float64 }

// emissions is the stage that turns energy into grams of CO2e. begin fixes
// one factor for the interval before any energy is split, so every share
// of that interval's energy, the consumers' and the node's, is priced
// alike (hence Σ consumers + idle + unattributed = node, as for joules),
// and a factor that arrives later never re-prices energy already priced.
type emissions struct {
	src    IntensitySource
	log    *zap.Logger
	f      carbon.Factor
	ok     bool
	warned bool
	// priced is per zone the cumulative energy already priced: the node's
	// grams grow by the zone's growth, which also covers the derived
	// zone "other" that no split sees.
	priced map[snapshot.ZoneID]pricedJ
}

// begin fixes the factor in force for this interval. Without any factor
// yet (a network provider not answered since start-up, no fallback) the
// interval's energy is priced nowhere, neither for consumers nor node.
func (e *emissions) begin() {
	e.f, e.ok = e.src.Factor()
	if !e.ok && !e.warned {
		e.warned = true
		e.log.Warn("no carbon intensity yet: energy is not priced until a provider answers")
	}
}

// credit is the split's hook: a consumer's share of one zone's energy.
func (e *emissions) credit(w *consumer, zone string, dynamicJ, idleJ float64) {
	if !e.ok {
		return
	}
	w.w.Grams = w.w.Grams.Add(e.f.Provider, zone, e.f.Grams(dynamicJ), e.f.Grams(idleJ))
}

// zones prices each zone's growth in this interval.
func (e *emissions) zones(zs *zones) {
	for _, id := range zs.order {
		z := zs.byID[id]
		p := e.priced[id]
		now := pricedJ{z.DynamicJ, z.IdleJ, z.UnattributedJ}
		e.priced[id] = now
		if !e.ok {
			continue
		}
		d, i, u := max(now.dynamic-p.dynamic, 0), max(now.idle-p.idle, 0), max(now.unattributed-p.unattributed, 0)
		if d == 0 && i == 0 && u == 0 {
			continue
		}
		k := 0
		for ; k < len(z.Grams) && z.Grams[k].Provider < e.f.Provider; k++ {
		}
		if k == len(z.Grams) || z.Grams[k].Provider != e.f.Provider {
			z.Grams = append(z.Grams, snapshot.NodeGrams{})
			copy(z.Grams[k+1:], z.Grams[k:])
			z.Grams[k] = snapshot.NodeGrams{Provider: e.f.Provider}
		}
		z.Grams[k].DynamicG += e.f.Grams(d)
		z.Grams[k].IdleG += e.f.Grams(i)
		z.Grams[k].UnattributedG += e.f.Grams(u)
	}
}

// publish gives the snapshot its own copy of the zones' grams and the
// providers' factors and health.
func (e *emissions) publish(s *snapshot.Snapshot) {
	for i := range s.Zones {
		s.Zones[i].Grams = append([]snapshot.NodeGrams(nil), s.Zones[i].Grams...)
	}
	s.Intensities = e.src.Intensities()
	s.Carbon = e.src.Health()
}
