package model

import (
	"fmt"
	"math"
	"time"
)

// IdleModel gives a zone's idle energy for an interval. Split clamps whatever
// it returns to the interval's energy, so a model may overestimate; Split
// reports that through Result.Clamped rather than inventing negative dynamic
// energy.
type IdleModel interface {
	IdleJ(dt time.Duration, energyJ, utilization float64) float64
}

var (
	_ IdleModel = (*ConfiguredIdle)(nil)
	_ IdleModel = (*LearnedIdle)(nil)
)

// ConfiguredIdle is an idle power the operator measured or took from a data
// sheet. It is stateless, so it may be shared between goroutines.
type ConfiguredIdle struct{ Watts float64 }

// NewConfiguredIdle validates watts: a negative or NaN idle power would make
// idle energy meaningless, and +Inf would clamp every interval to all-idle.
func NewConfiguredIdle(watts float64) (*ConfiguredIdle, error) {
	if !(watts >= 0 && watts <= math.MaxFloat64) {
		return nil, fmt.Errorf("model: idle power must be a finite number >= 0 W, got %v", watts)
	}
	return &ConfiguredIdle{Watts: watts}, nil
}

// IdleJ returns Watts × dt. A non-positive dt has no idle energy.
func (c ConfiguredIdle) IdleJ(dt time.Duration, _, _ float64) float64 {
	if dt <= 0 {
		return 0
	}
	return c.Watts * dt.Seconds()
}

// LearnedIdle learns idle power as the lowest mean power (energyJ/dt) seen in
// intervals whose utilization is <= Threshold. Utilization is in whatever unit
// the caller uses for Threshold (typically the node's busy fraction, 0..1).
//
// Ordering: IdleJ answers from what was learned BEFORE the current interval
// and only then learns from it. The alternative (learn first) would make any
// interval that sets a new minimum its own idle baseline, so its dynamic
// energy would be exactly 0 whatever actually ran in it — the estimate would
// be circular. Answering first keeps the estimate causal and deterministic
// (it depends only on earlier intervals, in call order), and when the current
// interval is below the learned baseline Split clamps and reports it, which
// is an honest signal that the baseline just came down. The cost is that the
// very first low-utilization interval still gets 0 idle.
//
// The minimum is never forgotten, so a single spuriously low reading lowers
// idle for the rest of the process's life; intervals with energyJ <= 0 are
// ignored for that reason, since a powered zone cannot use no energy and such
// a reading means a stale or broken counter.
//
// LearnedIdle is not safe for concurrent use: it is meant to be owned by the
// stats loop's goroutine, one instance per zone, and takes no lock so the
// loop pays nothing for it.
type LearnedIdle struct {
	threshold float64
	watts     float64
	learned   bool
}

// NewLearnedIdle returns a LearnedIdle that learns from intervals with
// utilization <= threshold. A NaN threshold never learns.
func NewLearnedIdle(threshold float64) *LearnedIdle {
	return &LearnedIdle{threshold: threshold}
}

// Learned reports whether an eligible interval has been seen yet.
func (l *LearnedIdle) Learned() bool { return l.learned }

// Watts is the learned idle power, 0 until Learned.
func (l *LearnedIdle) Watts() float64 { return l.watts }

// IdleJ returns the learned idle power × dt, then learns from this interval
// (see the type's comment for why in that order).
func (l *LearnedIdle) IdleJ(dt time.Duration, energyJ, utilization float64) float64 {
	sec := dt.Seconds()
	var idle float64
	if l.learned && sec > 0 {
		idle = l.watts * sec
	}
	// NaN utilization, energy or threshold all fail these comparisons, so
	// garbage never becomes the baseline.
	if sec > 0 && utilization <= l.threshold && energyJ > 0 && energyJ <= math.MaxFloat64 {
		if w := energyJ / sec; !l.learned || w < l.watts {
			l.watts = w
			l.learned = true
		}
	}
	return idle
}
