package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// IntensitySource is the carbon intensity the emissions stage prices
// energy at; *carbon.Chain implements it. Factor must only read a cache:
// it runs in every interval.
type IntensitySource interface {
	Factor() (snapshot.CarbonFactor, bool)
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
	f      snapshot.CarbonFactor
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
		z.Grams = e.price(id, pricedJ{z.DynamicJ, z.IdleJ, z.UnattributedJ}, z.Grams)
	}
}

// gpus prices each GPU device's growth in this interval, as zones: the
// processes' GPU joules are priced through credit, so the devices must be
// too for the grams to add up.
func (e *emissions) gpus(g *gpuStage) {
	for _, k := range g.order {
		d := g.devs[k]
		id := snapshot.ZoneID{Name: snapshot.ZoneGPU, Socket: d.zone}
		d.grams = e.price(id, pricedJ{d.rec.DynamicJ, d.rec.IdleJ, d.rec.UnattributedJ}, d.grams)
	}
}

// price adds to grams, under the interval's provider, the grams of a
// zone's growth since it was last priced.
func (e *emissions) price(id snapshot.ZoneID, now pricedJ, grams []snapshot.NodeGrams) []snapshot.NodeGrams {
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

// publish gives the snapshot its own copy of the zones' grams and the
// providers' factors and health.
func (e *emissions) publish(s *snapshot.Snapshot) {
	for i := range s.Zones {
		s.Zones[i].Grams = append([]snapshot.NodeGrams(nil), s.Zones[i].Grams...)
	}
	s.Intensities = e.src.Intensities()
	s.Carbon = e.src.Health()
}
