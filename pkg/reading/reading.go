// Package reading is what the sources hand the stats loop, and the check
// every value passes before it is credited.
//
// The readings: a meter's zone samples (meter.go), the probes' and the
// profiler's counters (counters.go, probes.go, perf.go), the GPUs'
// intervals and their holders (gpu.go), the carbon factor (carbon.go),
// cgroup resources (resources.go), BPF program statistics and map drops
// (bpf.go), the estimator's estimates (estimate.go) and a source's health
// (health.go). Sources produce them and the loop consumes them, so neither
// imports the other; the published snapshot (internal/snapshot) carries them on
// to the collectors.
//
// The check: every value from a meter, a BMC, a file, a BPF map or a
// vendor library passes one validation step before it touches a counter.
// A reading that fails is rejected with a reason, counted and logged by
// the source (Rejects), and never credited: one glitch must not rewrite an
// exported counter's history.
package reading

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"
)

// Reason says why a reading was rejected. The values are the `reason` label
// of wattrace_source_rejected_readings_total.
type Reason string

const (
	// NonFinite: NaN or ±Inf.
	NonFinite Reason = "non_finite"
	// Negative: below zero where the quantity cannot be.
	Negative Reason = "negative"
	// OutOfRange: above the source's declared maximum or the configured
	// ceiling for an instantaneous value.
	OutOfRange Reason = "out_of_range"
	// Backwards: a counter went down without a plausible wraparound (a
	// reset, a driver reload, or a glitch).
	Backwards Reason = "backwards"
	// TooFast: a counter grew faster than the configured ceiling allows.
	TooFast Reason = "too_fast"
	// Unreadable: the value could not be read or parsed.
	Unreadable Reason = "unreadable"
	// Late: the read overran its deadline (the stats loop's step, a slow
	// meter's power.meter-timeout, a provider's timeout): it was cut off,
	// or what it returned afterwards was dropped. The next good read of
	// a cumulative counter spans the gap.
	Late Reason = "late"
)

// Reasons lists every reason, for exporting zeros and for tests.
var Reasons = []Reason{NonFinite, Negative, OutOfRange, Backwards, TooFast, Unreadable, Late}

// ReasonDeadline is the health reason (SourceHealth.Reason, the `reason`
// of wattrace_source_degraded) of a source whose latest read overran its
// deadline.
const ReasonDeadline = "read_deadline_exceeded"

// Overran reports whether err is a read cut off at its deadline: a
// context's deadline, a connection's (os.ErrDeadlineExceeded), or a
// rejection for lateness.
func Overran(err error) bool {
	var rej *Rejection
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		errors.As(err, &rej) && rej.Reason == Late
}

// LateRead is the error of a read that overran deadline: a rejection for
// lateness that also is context.DeadlineExceeded.
func LateRead(deadline time.Duration) error {
	return fmt.Errorf("%w: %w", Reject(Late, deadline.Seconds(), "no answer within %v", deadline), context.DeadlineExceeded)
}

// Rejection is the error a rejected reading yields.
type Rejection struct {
	Reason Reason
	Value  float64
	Detail string
}

func (r *Rejection) Error() string {
	if r.Detail == "" {
		return fmt.Sprintf("rejected reading %g: %s", r.Value, r.Reason)
	}
	return fmt.Sprintf("rejected reading %g: %s (%s)", r.Value, r.Reason, r.Detail)
}

// Reject builds a rejection.
func Reject(reason Reason, v float64, detailf string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Value: v, Detail: fmt.Sprintf(detailf, args...)}
}

// CheckGauge validates an instantaneous value (watts, a utilization, a
// carbon intensity): finite, not negative, and not above max when max > 0.
func CheckGauge(v, max float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return Reject(NonFinite, v, "")
	case v < 0:
		return Reject(Negative, v, "")
	case max > 0 && v > max:
		return Reject(OutOfRange, v, "above %g", max)
	}
	return nil
}

// CPUTimeSlack is the Slack for a CPU-time counter (a cgroup's or a task's
// nanoseconds). The kernel folds a running task's runtime in only at ticks
// and context switches, so one read can carry up to a tick per CPU that was
// spent before the previous read (10 ms at HZ=100); garbage is far beyond.
const CPUTimeSlack = 50 * time.Millisecond

// Counter turns successive readings of a cumulative counter (joules,
// microjoules, nanoseconds) into validated increases.
//
// A reading is accepted when it is finite, within [0, Max] and its
// increase over the last accepted one is at most MaxRate per second of
// elapsed time. A reading below the last one is a wraparound only when
// Max is set and the wrapped increase (Max − prev + v) passes the same rate
// check, i.e. the previous value was near the top and the new one is near
// the bottom; anything else is a reset or a glitch and is rejected.
//
// A rejected reading is remembered as a candidate baseline: when the next
// reading continues plausibly from the old baseline, the rejected one was a
// glitch and nothing is lost; when it continues plausibly only from the
// candidate, the counter was reset and only the interval spanning the reset
// is dropped. Nothing implausible is ever credited.
type Counter struct {
	// Max is the value at which the counter wraps to zero (RAPL's
	// max_energy_range_uj); 0 means it does not wrap in practice.
	Max float64
	// MaxRate is the largest plausible increase per second (a power
	// ceiling for an energy counter); 0 disables the rate check.
	MaxRate float64
	// Slack widens the rate check to MaxRate × (Δt + Slack), for counters
	// whose values can lag their timestamps (the kernel folds a running
	// task's runtime in only at ticks, so a read can carry some from
	// before the previous one).
	Slack time.Duration
	// NeverResets is set for counters that cannot restart (a cgroup's CPU
	// usage: a re-created cgroup is a new one). A reading below the last
	// accepted one is then always a glitch, however consistent the
	// readings after it, and never becomes the baseline.
	NeverResets bool

	prev, cand   float64
	prevT, candT time.Time
	seen, hasCan bool
	// baseT is when the reading the last increase was measured from was
	// taken: the previous accepted one, or the candidate after a reset.
	baseT time.Time
}

// Since is the time of the reading the last returned increase was measured
// from: the previous accepted reading, or after a reset the rejected one
// it continued from. A caller that converts the increase to power divides
// by the time since then, not by the time since its previous attempt.
func (c *Counter) Since() time.Time { return c.baseT }

// Observe validates v read at t. It returns the increase since the last
// accepted reading; the first reading only sets the baseline and returns 0.
// On rejection it returns 0 and a *Rejection.
func (c *Counter) Observe(v float64, t time.Time) (float64, error) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, Reject(NonFinite, v, "")
	}
	if v < 0 {
		return 0, Reject(Negative, v, "")
	}
	if c.Max > 0 && v > c.Max {
		return 0, Reject(OutOfRange, v, "above the counter's range %g", c.Max)
	}
	if !c.seen {
		c.accept(v, t)
		return 0, nil
	}
	if d, ok := c.increase(c.prev, c.prevT, v, t, true); ok {
		c.baseT = c.prevT
		c.accept(v, t)
		return d, nil
	}
	if c.hasCan && !c.NeverResets {
		if d, ok := c.increase(c.cand, c.candT, v, t, false); ok {
			c.baseT = c.candT
			c.accept(v, t)
			return d, nil
		}
	}
	reason, detail := TooFast, fmt.Sprintf("from %g in %v", c.prev, t.Sub(c.prevT))
	if v < c.prev {
		reason = Backwards
	}
	c.cand, c.candT, c.hasCan = v, t, true
	return 0, Reject(reason, v, "%s", detail)
}

// Reset forgets the baseline, so the next reading starts afresh (a source
// that was re-opened).
func (c *Counter) Reset() {
	*c = Counter{Max: c.Max, MaxRate: c.MaxRate, Slack: c.Slack, NeverResets: c.NeverResets}
}

func (c *Counter) accept(v float64, t time.Time) {
	c.prev, c.prevT, c.seen, c.hasCan = v, t, true, false
}

// increase is the plausible increase from base (read at bt) to v (read at
// t), allowing a wraparound when wrap is set.
func (c *Counter) increase(base float64, bt time.Time, v float64, t time.Time, wrap bool) (float64, bool) {
	var d float64
	switch {
	case v >= base:
		d = v - base
	case wrap && c.Max > 0:
		d = c.Max - base + v
		if c.MaxRate <= 0 && (base < 0.75*c.Max || v > 0.25*c.Max) {
			// Without a rate ceiling, demand the literal shape of a wrap:
			// from the top quarter of the range to the bottom quarter.
			return 0, false
		}
	default:
		return 0, false
	}
	if c.MaxRate > 0 {
		dt := t.Sub(bt).Seconds()
		if dt <= 0 || d > c.MaxRate*(dt+c.Slack.Seconds()) {
			return 0, d == 0
		}
	}
	return d, true
}
