package gpu

import (
	"slices"
	"time"
)

// maxPending bounds the samples awaiting integration (an hour at 1 s):
// with no read for that long, the newest half is kept.
const maxPending = 3600

// Trapezoid integrates a device's power samples, taken in the background
// between two reads and at each read, into energy with the trapezoid
// rule, as the hwmon meter does: a one-sample-per-interval rectangle
// misses every change of power within the interval. Not safe for
// concurrent use: the source guards it.
type Trapezoid struct {
	joules  float64
	prevW   float64
	prevT   time.Time
	pending []powerSample
}

type powerSample struct {
	t time.Time
	w float64
}

// Add keeps a validated power sample, in watts, taken at t.
func (z *Trapezoid) Add(t time.Time, watts float64) {
	if len(z.pending) >= maxPending {
		z.pending = append(z.pending[:0], z.pending[len(z.pending)/2:]...)
	}
	z.pending = append(z.pending, powerSample{t, watts})
}

// Integrate folds the samples taken up to now into the energy, in time
// order, and returns the energy integrated so far (joules, cumulative:
// a counter for gpu.Meter.Counter) and when the newest folded sample was
// taken (zero before any). Samples after now wait for the next call; a
// sample not after the last folded one is dropped, so no span counts
// twice.
func (z *Trapezoid) Integrate(now time.Time) (joules float64, last time.Time) {
	slices.SortFunc(z.pending, func(a, b powerSample) int { return a.t.Compare(b.t) })
	k := 0
	for _, p := range z.pending {
		if p.t.After(now) {
			z.pending[k] = p
			k++
			continue
		}
		if !z.prevT.IsZero() {
			if !p.t.After(z.prevT) {
				continue
			}
			z.joules += (z.prevW + p.w) / 2 * p.t.Sub(z.prevT).Seconds()
		}
		z.prevW, z.prevT = p.w, p.t
	}
	z.pending = z.pending[:k]
	return z.joules, z.prevT
}

// Reset forgets the samples and the integral (the device's meter
// restarted).
func (z *Trapezoid) Reset() { *z = Trapezoid{pending: z.pending[:0]} }

// Pending is how many samples await integration (tests).
func (z *Trapezoid) Pending() []time.Time {
	out := make([]time.Time, len(z.pending))
	for i, p := range z.pending {
		out[i] = p.t
	}
	return out
}
