package power

import (
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// Coefficients parameterise the linear estimator: node power is
// CPUs*MinWattsPerCPU at idle, rising linearly to CPUs*MaxWattsPerCPU at
// full utilisation.
type Coefficients struct {
	MinWattsPerCPU float64 // watts per (v)CPU at 0% utilisation
	MaxWattsPerCPU float64 // watts per (v)CPU at 100% utilisation
	CPUs           int     // (v)CPUs the figures are multiplied by
	Source         string  // human citation for the figures
	Arch           string  // microarchitecture row used, or "average"
}

// validate rejects coefficients that would make the estimate negative,
// non-finite or shrink with load.
func (c Coefficients) validate() error {
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case !finite(c.MinWattsPerCPU) || c.MinWattsPerCPU < 0 || c.MinWattsPerCPU > MaxWattsPerCPULimit:
		return fmt.Errorf("MinWattsPerCPU must be a finite value in [0, %g], got %v", float64(MaxWattsPerCPULimit), c.MinWattsPerCPU)
	case !finite(c.MaxWattsPerCPU) || c.MaxWattsPerCPU < c.MinWattsPerCPU || c.MaxWattsPerCPU > MaxWattsPerCPULimit:
		return fmt.Errorf("MaxWattsPerCPU must be finite, >= MinWattsPerCPU (%v) and <= %g, got %v", c.MinWattsPerCPU, float64(MaxWattsPerCPULimit), c.MaxWattsPerCPU)
	case c.CPUs <= 0:
		return fmt.Errorf("CPUs must be > 0, got %d", c.CPUs)
	}
	return nil
}

// MaxWattsPerCPULimit bounds the estimator's per-CPU figures: the largest
// server CPUs draw well under 20 W per hardware thread, so anything near
// this is a typo, and a huge value (1e308) would overflow to Inf.
const MaxWattsPerCPULimit = 1000

// Estimator is the Meter for nodes without an energy meter (VMs, most
// arm64 hosts). Its energy is modelled, not measured: see the package
// documentation for how far off it can be. It is safe for concurrent use;
// typically one goroutine calls Advance each collection interval while the
// exporter calls Read.
type Estimator struct {
	c Coefficients

	mu     sync.Mutex
	joules float64
}

// NewEstimator returns an estimator with zero accumulated energy.
func NewEstimator(c Coefficients) (*Estimator, error) {
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("power: invalid estimator coefficients (arch %q): %w", c.Arch, err)
	}
	return &Estimator{c: c}, nil
}

// Advance adds the energy used over dt at node CPU utilisation util
// (0 = idle, 1 = every CPU busy). util is clamped to [0,1], NaN counts as
// idle; dt <= 0 adds nothing. The integration is a rectangle rule, so util
// should be the average over dt, not an instantaneous sample.
func (e *Estimator) Advance(util float64, dt time.Duration) {
	if dt <= 0 {
		return
	}
	switch {
	case !(util >= 0): // also catches NaN
		util = 0
	case util > 1:
		util = 1
	}
	n := float64(e.c.CPUs)
	watts := n*e.c.MinWattsPerCPU + n*(e.c.MaxWattsPerCPU-e.c.MinWattsPerCPU)*util
	e.mu.Lock()
	e.joules += watts * dt.Seconds()
	e.mu.Unlock()
}

// Coefficients returns the coefficients the estimator was built with.
func (e *Estimator) Coefficients() Coefficients { return e.c }

// Name implements Meter.
func (e *Estimator) Name() string { return "estimator" }

// Estimated implements Meter.
func (e *Estimator) Estimated() bool { return true }

// Read implements Meter: one node-wide "package" zone (Socket -1) holding
// the energy accumulated by Advance. It never fails.
func (e *Estimator) Read() ([]ZoneSample, error) {
	e.mu.Lock()
	j := e.joules
	e.mu.Unlock()
	return []ZoneSample{{Zone: ZonePackage, Socket: -1, Joules: j}}, nil
}

// IdleWatts is the model's own idle power: the estimator knows its idle
// exactly (every CPU at its minimum), so nothing needs to be learned.
func (e *Estimator) IdleWatts(zone string) (float64, bool) {
	if zone != ZonePackage {
		return 0, false
	}
	return float64(e.c.CPUs) * e.c.MinWattsPerCPU, true
}

// Health implements HealthReporter: a model is always up and never rejects
// a reading (utilization is clamped to [0, 1] in Advance).
func (e *Estimator) Health() []snapshot.SourceHealth {
	return []snapshot.SourceHealth{{Source: e.Name(), Up: true, Rejected: map[string]uint64{}}}
}
