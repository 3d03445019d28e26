package power

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Combined is a Meter that unions the zones of several meters (RAPL for
// the CPU, a BMC for the platform, hwmon for GPUs).
//
// Duplicate zones: a zone name belongs to the first meter, in argument
// order, that reports it, and that ownership never moves. Later meters'
// samples of that zone, on any socket, are dropped: summing a RAPL
// "package" per socket with a BMC's node-wide "package" would count the
// CPUs twice, and switching owners would break the cumulative counter.
//
// A meter that fails does not fail the others: Read returns the samples of
// those that succeeded and fails only when every meter failed. The per-meter
// errors of the latest Read are in LastErrors.
type Combined struct {
	meters []Meter

	mu      sync.Mutex
	owner   map[string]int // zone name -> index of the meter that owns it
	lastErr []error
}

// Combine returns a Meter over meters; see Combined for the rules.
func Combine(meters ...Meter) *Combined {
	return &Combined{meters: meters, owner: make(map[string]int), lastErr: make([]error, len(meters))}
}

// Name implements Meter: the members' names joined with "+".
func (c *Combined) Name() string {
	names := make([]string, len(c.meters))
	for i, m := range c.meters {
		names[i] = m.Name()
	}
	return strings.Join(names, "+")
}

// Estimated implements Meter: true if any member is a model.
func (c *Combined) Estimated() bool {
	for _, m := range c.meters {
		if m.Estimated() {
			return true
		}
	}
	return false
}

// Meters returns the members, in precedence order.
func (c *Combined) Meters() []Meter { return c.meters }

// SourceEstimated says whether the member named source is a model; ok is
// false when no member bears the name. The stats loop asks it to label
// each zone by the member that measured it.
func (c *Combined) SourceEstimated(source string) (estimated, ok bool) {
	for _, m := range c.meters {
		if m.Name() == source {
			return m.Estimated(), true
		}
	}
	return false, false
}

// Read implements Meter. Every sample carries its meter's name in Source.
// Each member is read with ctx.
func (c *Combined) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []reading.ZoneSample
	failed := 0
	for i, m := range c.meters {
		samples, err := m.Read(ctx)
		c.lastErr[i] = err
		if err != nil {
			failed++
			continue
		}
		for _, s := range samples {
			o, ok := c.owner[s.Zone]
			if !ok {
				c.owner[s.Zone], o = i, i
			}
			if o != i {
				continue
			}
			if s.Source == "" {
				s.Source = m.Name()
			}
			out = append(out, s)
		}
	}
	if failed == len(c.meters) && failed > 0 {
		return nil, errors.Join(c.lastErr...)
	}
	return out, nil
}

// LastErrors returns each member's error from the latest Read (nil where it
// succeeded), in precedence order.
func (c *Combined) LastErrors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]error(nil), c.lastErr...)
}

// Close closes every member that is a Closer (cached meters stop their
// goroutines).
func (c *Combined) Close() error {
	var errs []error
	for _, m := range c.meters {
		if cl, ok := m.(interface{ Close() error }); ok {
			errs = append(errs, cl.Close())
		}
	}
	return errors.Join(errs...)
}

// Advance implements Advancer for the members that model from utilization
// (an estimator standing in for the CPU next to a measured platform).
func (c *Combined) Advance(util float64, dt time.Duration) {
	for _, m := range c.meters {
		if a, ok := m.(Advancer); ok {
			a.Advance(util, dt)
		}
	}
}

// IdleWatts implements IdleModeler: the model of the member that owns zone
// (or, before the zone was first read, the first member that has one).
func (c *Combined) IdleWatts(zone string) (float64, bool) {
	c.mu.Lock()
	o, owned := c.owner[zone]
	c.mu.Unlock()
	for i, m := range c.meters {
		if owned && i != o {
			continue
		}
		if im, ok := m.(IdleModeler); ok {
			if w, ok := im.IdleWatts(zone); ok {
				return w, true
			}
		}
	}
	return 0, false
}

// Estimates implements EstimateReporter for the members that model.
func (c *Combined) Estimates() []reading.Estimate {
	var out []reading.Estimate
	for _, m := range c.meters {
		if r, ok := m.(EstimateReporter); ok {
			out = append(out, r.Estimates()...)
		}
	}
	return out
}

// ReadWithin implements ReadWithin: the shortest of its members'.
func (c *Combined) ReadWithin() time.Duration {
	var least time.Duration
	for _, m := range c.meters {
		if w, ok := m.(ReadWithin); ok {
			if d := w.ReadWithin(); d > 0 && (least == 0 || d < least) {
				least = d
			}
		}
	}
	return least
}
