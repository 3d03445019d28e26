package hostshare

import (
	"context"
	"errors"
	"slices"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Fallback is the guest's node meter when a share is present: the host's
// figures while they arrive, the estimator once they are stale. Each sample
// names the meter its latest energy came from (the zone's source and method
// labels follow it), so a guest that estimates says so.
//
// Its zones are cumulative and never go back. When the share goes stale,
// the estimate covers the time since the host's last update (the last new
// metadata sequence read); when the host
// comes back, its counters take a fresh baseline, so the outage, already
// estimated, is not counted twice.
type Fallback struct {
	host *Meter
	est  power.Meter
	log  *zap.Logger

	mu        sync.Mutex
	falling   bool
	outJ      map[string]float64 // zone -> cumulative joules
	source    map[string]string  // zone -> the meter its energy last came from
	method    map[string]string  // zone -> how that meter got it
	order     []string
	prevHost  map[string]float64
	prevEst   map[string]float64
	prevDyn   map[string]float64 // as prevEst, of the estimator's dynamic energy
	lastEpoch string
	lastSeq   uint64
	// ended are the host's zones the estimator does not model, while it
	// stands in: sorted, nil otherwise.
	ended       []string
	warnedEnded bool
}

var (
	_ power.Meter            = (*Fallback)(nil)
	_ power.HealthReporter   = (*Fallback)(nil)
	_ power.Advancer         = (*Fallback)(nil)
	_ power.EstimateReporter = (*Fallback)(nil)
	_ power.ZoneEnder        = (*Fallback)(nil)
)

// ReasonZonesNotEstimated is the host source's wattrace_source_degraded
// reason while the estimator stands in and some of the host's zones
// (dram, …) are not modelled by it: those zones' series have ended.
const ReasonZonesNotEstimated = "host_share_stale_zones_not_estimated"

// NewFallback returns the meter over host and the estimator est.
func NewFallback(host *Meter, est power.Meter, log *zap.Logger) *Fallback {
	if log == nil {
		log = zap.NewNop()
	}
	return &Fallback{host: host, est: est, log: log, outJ: map[string]float64{}, source: map[string]string{}, method: map[string]string{},
		prevHost: map[string]float64{}, prevEst: map[string]float64{}, prevDyn: map[string]float64{}}
}

// Name implements power.Meter: the host's name (the source of the zones
// while the host's figures arrive).
func (f *Fallback) Name() string { return f.host.Name() }

// Estimated implements power.Meter: true while falling back.
func (f *Fallback) Estimated() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.falling
}

// Falling reports whether the estimator stands in for the host.
func (f *Fallback) Falling() bool { return f.Estimated() }

// Meters lets the stats loop label each zone by the member its samples
// name: the host measured, the estimator estimated.
func (f *Fallback) Meters() []power.Meter { return []power.Meter{f.host, f.est} }

// Advance implements power.Advancer for the estimator, which must follow
// the guest's load all along to stand in at once.
func (f *Fallback) Advance(util float64, dt time.Duration) {
	if a, ok := f.est.(power.Advancer); ok {
		a.Advance(util, dt)
	}
}

// Read implements power.Meter.
func (f *Fallback) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	hs, herr := f.host.Read(ctx)
	stale := f.host.Stale()
	es, eerr := f.est.Read(ctx)
	var ds []reading.ZoneSample
	dynOK := false
	if d, ok := f.est.(power.DynamicReader); ok {
		var derr error
		ds, derr = d.ReadDynamic()
		dynOK = derr == nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	estJ, dynJ := map[string]float64{}, map[string]float64{}
	if eerr == nil {
		for _, s := range es {
			estJ[s.Zone] += s.Joules
		}
		for _, s := range ds {
			dynJ[s.Zone] += s.Joules
		}
	}
	switch {
	case !stale && herr == nil:
		if f.falling {
			f.falling = false
			f.ended, f.warnedEnded = nil, false
			f.log.Info("host share fresh again: the host's figures replace the estimate", zap.String("source", f.host.Name()))
			for _, s := range hs {
				f.prevHost[s.Zone] = s.Joules
				f.credit(s.Zone, 0, s.Source, s.Method)
			}
			break
		}
		for _, s := range hs {
			f.credit(s.Zone, max(s.Joules-f.prevHost[s.Zone], 0), s.Source, s.Method)
			f.prevHost[s.Zone] = s.Joules
		}
		if epoch, seq := f.host.Update(); epoch != f.lastEpoch || seq != f.lastSeq {
			// A new update: the estimate would start here if the host
			// went quiet now.
			f.lastEpoch, f.lastSeq = epoch, seq
			for z, j := range estJ {
				f.prevEst[z] = j
				f.prevDyn[z] = dynJ[z]
			}
		}
	case stale:
		if !f.falling {
			f.falling = true
			f.log.Warn("host share stale: estimating until the host's figures come back",
				zap.String("source", f.host.Name()), zap.Error(herr))
		}
		for _, s := range hs {
			f.prevHost[s.Zone] = s.Joules
		}
		zones := make([]string, 0, len(estJ))
		for z := range estJ {
			zones = append(zones, z)
		}
		sort.Strings(zones)
		f.ended = f.ended[:0]
		for _, z := range f.order {
			if _, ok := estJ[z]; !ok {
				// The estimator has no figure for this zone: its
				// measured series ends rather than freezing under a
				// label that says the host measures it.
				f.ended = append(f.ended, z)
			}
		}
		sort.Strings(f.ended)
		if len(f.ended) > 0 && !f.warnedEnded {
			f.warnedEnded = true
			f.log.Warn("host share stale: zones the estimator does not model are no longer counted until the host is back",
				zap.Strings("zones", f.ended))
		}
		for _, z := range zones {
			d := max(estJ[z]-f.prevEst[z], 0)
			if dynOK && f.host.IdlePolicy(z) == "none" {
				// The host's figures held no idle energy: nor does
				// the estimate that stands in for them, or the zone
				// would mean something else while the host is away.
				d = max(dynJ[z]-f.prevDyn[z], 0)
			}
			f.prevEst[z], f.prevDyn[z] = estJ[z], dynJ[z]
			f.credit(z, d, f.est.Name(), reading.MethodEstimated)
		}
	default:
		// Failing but not stale yet: nothing is credited; if the host
		// comes back its next reading covers the gap.
	}
	if len(f.order) == 0 {
		return nil, errors.Join(herr, eerr, errors.New("hostshare: no zone read yet"))
	}
	out := make([]reading.ZoneSample, 0, len(f.order))
	for _, z := range f.order {
		if slices.Contains(f.ended, z) {
			continue
		}
		out = append(out, reading.ZoneSample{Zone: z, Socket: -1, Joules: f.outJ[z], Source: f.source[z], Method: f.method[z]})
	}
	return out, nil
}

// EndedZones implements power.ZoneEnder: while the estimator stands in,
// the host's zones it does not model.
func (f *Fallback) EndedZones() []reading.ZoneID {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []reading.ZoneID
	for _, z := range f.ended {
		out = append(out, reading.ZoneID{Name: z, Socket: -1})
	}
	return out
}

func (f *Fallback) credit(zone string, j float64, source, method string) {
	if _, ok := f.outJ[zone]; !ok {
		f.order = append(f.order, zone)
	}
	f.outJ[zone] += j
	f.source[zone], f.method[zone] = source, method
}

// Health implements power.HealthReporter: the host share's (down while it
// fails or is stale) and the estimator's.
func (f *Fallback) Health() []reading.SourceHealth {
	out := f.host.Health()
	f.mu.Lock()
	if len(f.ended) > 0 && len(out) > 0 && out[0].Reason == "" {
		out[0].Reason = ReasonZonesNotEstimated
	}
	f.mu.Unlock()
	if h, ok := f.est.(power.HealthReporter); ok {
		out = append(out, h.Health()...)
	}
	return out
}

// Estimates implements power.EstimateReporter: the estimator's bands and
// model while it stands in for the host, none while the host's figures
// count (they are not modelled here).
func (f *Fallback) Estimates() []reading.Estimate {
	if !f.Falling() {
		return nil
	}
	if r, ok := f.est.(power.EstimateReporter); ok {
		return r.Estimates()
	}
	return nil
}

// Close closes the estimator if it holds anything.
func (f *Fallback) Close() error {
	if c, ok := f.est.(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
