package gpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// DefaultMaxWatts is the ceiling on one device's power unless configured:
// above every shipping board (B200 is 1 kW, MI300X 750 W) with margin, and
// far below what a counter glitch or a reset produces.
const DefaultMaxWatts = 2000.0

// Meter validates one device's energy, whatever the method, and keeps its
// health. Sources own one per device; it is not safe for concurrent use.
type Meter struct {
	maxW float64
	// tall counts the reads and rejections (in the source's shared
	// Rejects); the meter ages the last good reading itself, by the
	// source's clock.
	tall *sourcehealth.Tally
	ctr  reading.Counter

	last, good     time.Time
	seen           bool
	lastInterval   time.Duration
	lastPowerWatts float64
}

// NewMeter returns the meter of the device named health ("nvml/GPU-…"),
// refusing power above maxW (DefaultMaxWatts when <= 0). Rejections are
// counted in rejects, which a source shares among its devices.
func NewMeter(health string, maxW float64, rejects *reading.Rejects) *Meter {
	if maxW <= 0 {
		maxW = DefaultMaxWatts
	}
	return &Meter{maxW: maxW, tall: sourcehealth.New(health, sourcehealth.Options{Rejects: rejects}), ctr: reading.Counter{MaxRate: maxW}}
}

// Counter takes a cumulative energy reading in joules read at now and
// returns the validated increase since the previous reading. ok is false
// for the first reading (a baseline) and for a rejected one (a reset after a
// driver reload, a glitch, a jump): the counter then resumes from the next
// plausible reading and never goes backwards. The increase after a
// rejected reading covers the time since the reading it was measured from,
// and Interval says so: a glitch neither loses the energy nor doubles the
// next interval's power.
func (m *Meter) Counter(joules float64, now time.Time) (energyJ float64, ok bool) {
	d, err := m.ctr.Observe(joules, now)
	if err != nil {
		m.reject(err)
		return 0, false
	}
	m.tall.ReadAt(nil, now)
	first := !m.seen
	m.last, m.seen = now, true
	m.good = now
	if first {
		return 0, false
	}
	m.lastInterval = now.Sub(m.ctr.Since())
	if m.lastInterval > 0 {
		m.lastPowerWatts = d / m.lastInterval.Seconds()
	}
	return d, true
}

// Power takes a power reading in watts (instantaneous or the device's own
// short average) and returns it integrated over the time since the previous
// accepted reading. The first reading only starts the clock; a rejected
// one leaves it where it was, so the next accepted reading covers the gap.
func (m *Meter) Power(watts float64, now time.Time) (energyJ float64, ok bool) {
	if err := reading.CheckGauge(watts, m.maxW); err != nil {
		m.reject(err)
		return 0, false
	}
	m.tall.ReadAt(nil, now)
	first := !m.seen
	m.step(now)
	m.good = now
	m.lastPowerWatts = watts
	if first || m.lastInterval <= 0 {
		return 0, false
	}
	return watts * m.lastInterval.Seconds(), true
}

// Integrated takes the energy a power integrator holds at now (joules,
// integrated up to its last sample at) and credits it as a counter reading,
// or records why it cannot: a failed sample (sampleErr), no sample yet, or
// no sample at the read itself. In each of those the interval's end is
// unknown, so nothing is credited now and the next read's energy spans the
// gap. sampleErr is formatted with %v, not wrapped: the sample counted its
// rejection already.
func (m *Meter) Integrated(joules float64, at time.Time, sampleErr error, now time.Time) (energyJ float64, ok bool) {
	switch {
	case sampleErr != nil:
		m.Fail(fmt.Errorf("power sample: %v", sampleErr), now)
	case at.IsZero():
		m.Fail(errors.New("no power sample yet"), now)
	case !at.Equal(now):
		// This read's own sample was not taken (raced).
		m.Fail(errors.New("no power sample at the read"), now)
	default:
		return m.Counter(joules, now)
	}
	return 0, false
}

// Fail records a read that produced no value (the file or call failed).
func (m *Meter) Fail(err error, now time.Time) {
	m.tall.Reject(err, m.tall.Source())
	m.tall.ReadAt(err, now)
}

// reject counts a rejected reading: a failed read that leaves the device
// as up or down as it was.
func (m *Meter) reject(err error) {
	m.tall.Reject(err, m.tall.Source())
	m.tall.Count(err)
}

// step advances the clock to an accepted reading. The interval is the time
// since the previous accepted reading: a rejected or failed read does not
// move the baseline, so the next accepted reading's energy and interval
// cover the same span.
func (m *Meter) step(now time.Time) {
	if m.seen {
		m.lastInterval = now.Sub(m.last)
	}
	m.last, m.seen = now, true
}

// Restart forgets the baseline (the source re-initialised: the device's
// counter restarted with its driver), keeping the health counts. The next
// reading is a baseline again.
func (m *Meter) Restart() {
	m.ctr.Reset()
	m.seen, m.lastInterval, m.lastPowerWatts = false, 0, 0
}

// Interval is the time covered by the last value returned.
func (m *Meter) Interval() time.Duration { return m.lastInterval }

// PowerW is the last accepted mean or read power.
func (m *Meter) PowerW() float64 { return m.lastPowerWatts }

// Health reports the device's state at now.
func (m *Meter) Health(now time.Time) reading.SourceHealth {
	h := m.tall.Health()
	if !m.good.IsZero() {
		h.Age = now.Sub(m.good)
	}
	return h
}
