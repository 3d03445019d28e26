package power

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/reading"
)

// EstimatedZone is one zone the estimator models: its power as a function
// of node utilisation (a curve from pkg/power/curves, with its band).
type EstimatedZone struct {
	Zone  string // ZonePackage or ZonePlatform
	Curve curves.Curve
}

// LinearZone is a zone whose power rises in a straight line from idleW at
// no load to maxW at full load, without a band: for tests and for figures
// an operator sets.
func LinearZone(zone string, idleW, maxW float64) EstimatedZone {
	var c curves.Curve
	for l := range c.Points {
		w := idleW + (maxW-idleW)*curves.Levels[l]/100
		c.Points[l] = curves.Estimate{Watts: w, Lower: w, Upper: w}
	}
	c.Info = curves.Info{Kind: curves.KindVM, Tier: "configuration", Source: "configuration"}
	return EstimatedZone{Zone: zone, Curve: c}
}

// validate rejects a curve that would make the energy negative, non-finite
// or shrink with load, or a band that does not hold the estimate.
func (z EstimatedZone) validate() error {
	if z.Zone == "" {
		return errors.New("zone has no name")
	}
	prev := 0.0
	for l, p := range z.Curve.Points {
		for _, v := range []float64{p.Watts, p.Lower, p.Upper} {
			if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > defaultMaxWatts[reading.ZonePlatform] {
				return fmt.Errorf("zone %s at %v%%: %v W is not a power in [0, %g]", z.Zone, curves.Levels[l], v, defaultMaxWatts[reading.ZonePlatform])
			}
		}
		if p.Watts < prev {
			return fmt.Errorf("zone %s: power falls from %v W to %v W at %v%% load", z.Zone, prev, p.Watts, curves.Levels[l])
		}
		if p.Lower > p.Watts || p.Upper < p.Watts {
			return fmt.Errorf("zone %s at %v%%: band [%v, %v] does not hold %v W", z.Zone, curves.Levels[l], p.Lower, p.Upper, p.Watts)
		}
		prev = p.Watts
	}
	return nil
}

// Estimator is the Meter for nodes without an energy meter (VMs, most
// arm64 hosts, servers without a BMC). Its energy is modelled, not
// measured: see the package documentation and docs/meters.md for how far
// off it can be. It is safe for concurrent use; typically one goroutine
// calls Advance each collection interval while the exporter calls Read.
type Estimator struct {
	mu    sync.Mutex
	zones []estZone
	steal *steal // a VM's; nil: nothing is stolen
}

type estZone struct {
	EstimatedZone
	joules float64
	dynJ   float64 // the part above the curve's idle power
	last   curves.Estimate
}

// DynamicReader is a model that also keeps each zone's dynamic energy:
// what it estimated above the zone's idle power. A stand-in for figures
// that hold no idle energy (a host share under idle policy none) counts
// that, so the zone keeps its meaning when the model takes over.
type DynamicReader interface {
	ReadDynamic() ([]reading.ZoneSample, error)
}

var _ DynamicReader = (*Estimator)(nil)

// NewEstimator returns an estimator of the given zones with zero
// accumulated energy.
func NewEstimator(zones ...EstimatedZone) (*Estimator, error) {
	if len(zones) == 0 {
		return nil, errors.New("power: estimator without zones")
	}
	e := &Estimator{}
	seen := map[string]bool{}
	for _, z := range zones {
		if err := z.validate(); err != nil {
			return nil, fmt.Errorf("power: invalid estimator curve: %w", err)
		}
		if seen[z.Zone] {
			return nil, fmt.Errorf("power: estimator zone %s given twice", z.Zone)
		}
		seen[z.Zone] = true
		e.zones = append(e.zones, estZone{EstimatedZone: z, last: z.Curve.Points[0]})
	}
	return e, nil
}

// Advance adds the energy used over dt at node CPU utilization util
// (0 = idle, 1 = every CPU busy: the CPUs' busy time over all of dt). util
// is clamped to [0,1], NaN counts as idle; dt <= 0 adds nothing. The
// integration is a rectangle rule, so util should be the average over dt,
// not an instantaneous sample.
//
// With SetSteal (a VM), a stolen fraction s of the vCPUs' time in the
// interval changes three things (curves.Curve.AtStolen). The load on the curve is the guest's
// busy time over the time it had, util/(1−s) (at most 1). The power is
// the curve's idle watts, whole (the vCPUs' share of the host's idle draw
// is theirs by allocation, stolen or not), plus its dynamic watts at that
// load for the (1−s) of the time the vCPUs ran: idle + (1−s)·(P(load) −
// idle); the stolen time's dynamic energy is whoever's ran then. The
// band's upper end counts the stolen time as the guest's at the same load
// (steal also holds the host's own work for the guest, QEMU's emulator
// and vhost threads, which the guest cannot tell from other tenants'), so
// it widens with steal: upper = Upper(load). Without steal all three are
// the curve at util.
func (e *Estimator) Advance(util float64, dt time.Duration) {
	e.mu.Lock()
	st := e.steal
	e.mu.Unlock()
	stolen := 0.0
	if st != nil {
		// Read even when dt is 0, so the next interval's steal is
		// measured over the same window as its load.
		stolen = st.observe(dt)
	}
	if dt <= 0 {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.zones {
		z := &e.zones[i]
		z.last = z.Curve.AtStolen(util, stolen)
		z.joules += z.last.Watts * dt.Seconds()
		z.dynJ += max(z.last.Watts-z.Curve.Points[0].Watts, 0) * dt.Seconds()
	}
}

// Zones returns the modelled zones.
func (e *Estimator) Zones() []EstimatedZone {
	out := make([]EstimatedZone, len(e.zones))
	for i, z := range e.zones {
		out[i] = z.EstimatedZone
	}
	return out
}

// Name implements Meter.
func (e *Estimator) Name() string { return "estimator" }

// Estimated implements Meter.
func (e *Estimator) Estimated() bool { return true }

// Read implements Meter: one node-wide zone (Socket -1) per curve holding
// the energy accumulated by Advance. It never fails.
func (e *Estimator) Read(_ context.Context) ([]reading.ZoneSample, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]reading.ZoneSample, len(e.zones))
	for i, z := range e.zones {
		out[i] = reading.ZoneSample{Zone: z.Zone, Socket: -1, Joules: z.joules}
	}
	return out, nil
}

// ReadDynamic implements DynamicReader: Read's zones holding only the
// energy above each curve's idle power. It never fails.
func (e *Estimator) ReadDynamic() ([]reading.ZoneSample, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]reading.ZoneSample, len(e.zones))
	for i, z := range e.zones {
		out[i] = reading.ZoneSample{Zone: z.Zone, Socket: -1, Joules: z.dynJ}
	}
	return out, nil
}

// IdleWatts is the model's own idle power: the curve's value at no load,
// so nothing needs to be learned.
func (e *Estimator) IdleWatts(zone string) (float64, bool) {
	for _, z := range e.zones {
		if z.Zone == zone {
			return z.Curve.Points[0].Watts, true
		}
	}
	return 0, false
}

// Estimates implements EstimateReporter: each zone's power at the last
// Advance (idle before the first) with its band.
func (e *Estimator) Estimates() []reading.Estimate {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]reading.Estimate, len(e.zones))
	for i, z := range e.zones {
		in := z.Curve.Info
		out[i] = reading.Estimate{ZoneID: reading.ZoneID{Name: z.Zone, Socket: -1}, Source: e.Name(),
			Watts: z.last.Watts, LowerW: z.last.Lower, UpperW: z.last.Upper,
			Curve: in.Kind, Tier: in.Tier, CPU: in.CPU, Arch: in.Arch, Coefficients: in.Source}
	}
	return out
}

// Health implements HealthReporter: a model is always up
// (utilization is clamped to [0, 1] in Advance); the only readings it can
// reject are a VM's steal counter's.
func (e *Estimator) Health() []reading.SourceHealth {
	e.mu.Lock()
	st := e.steal
	e.mu.Unlock()
	rej := map[string]uint64{}
	if st != nil {
		rej = st.rejects.Counts()
	}
	return []reading.SourceHealth{{Source: e.Name(), Up: true, Rejected: rej}}
}
