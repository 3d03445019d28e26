// Package model is wattrace's ratio power model: it splits one energy zone's
// energy for one interval into idle and dynamic parts and divides the dynamic
// part among workloads by their share of a usage metric.
//
// The one invariant everything here protects is conservation: for every
// interval, Σ workload dynamic + unattributed + node idle = node energy, up to
// float64 rounding and never by more than a few ulps of the node energy.
// Exporters that round each workload's share independently (or up) publish
// parts that do not add up to the whole, and then nobody can trust either.
//
// Nothing in this package holds global state; Split is a pure function of its
// arguments apart from the maps it adds into.
package model

import (
	"fmt"
	"math"
)

// IdlePolicy says how a zone's idle energy is attributed to workloads.
// Whatever the policy, node-level idle energy is always reported, so a
// policy only changes who is shown as carrying it, never the node totals.
type IdlePolicy string

const (
	// IdleNone keeps idle energy at node level only: the honest default,
	// since idle power is drawn whether or not any workload runs.
	IdleNone IdlePolicy = "none"
	// IdleEven splits idle energy evenly among the workloads present in
	// the interval (the keys of the usage map, even those with usage 0),
	// for chargeback schemes where every tenant pays for the machine
	// being on.
	IdleEven IdlePolicy = "even"
	// IdleShare splits idle energy by the same usage share as dynamic
	// energy, falling back to an even split when nobody used anything.
	IdleShare IdlePolicy = "cpu"
)

// ParseIdlePolicy turns a configuration value into an IdlePolicy. It is strict
// (exact, lower-case) so that a typo in a config file fails at start-up
// instead of silently selecting a different attribution.
func ParseIdlePolicy(s string) (IdlePolicy, error) {
	switch p := IdlePolicy(s); p {
	case IdleNone, IdleEven, IdleShare:
		return p, nil
	}
	return "", fmt.Errorf("model: unknown idle policy %q (allowed: %q, %q, %q)",
		s, IdleNone, IdleEven, IdleShare)
}

// Interval is one zone's input for one interval.
type Interval[K comparable] struct {
	// EnergyJ is the zone's node energy in this interval. It must be >= 0;
	// the caller derives it from monotonic counters, so a negative, NaN or
	// infinite value can only be a bug upstream. Split treats such a value
	// as 0 rather than letting it poison cumulative counters forever.
	EnergyJ float64
	// IdleJ is the idle model's energy for this interval, before clamping.
	// Negative or NaN is treated as 0.
	IdleJ float64
	// Usage is each workload's usage metric in this interval (CPU time
	// today, cycles or instructions later). Negative, NaN and infinite
	// values are treated as 0: an infinite share cannot be divided and a
	// negative one would hand energy back.
	Usage map[K]float64
	// Policy selects idle attribution. Any value other than IdleEven or
	// IdleShare (including the zero value) behaves as IdleNone, which
	// cannot break conservation.
	Policy IdlePolicy
}

// Result is the node-level outcome of Split. IdleJ + DynamicJ equals the
// (sanitised) EnergyJ of the interval, and UnattributedJ is the part of
// DynamicJ that no workload received.
type Result struct {
	IdleJ, DynamicJ, UnattributedJ float64
	// Clamped is set when the idle model exceeded EnergyJ and IdleJ was
	// clamped to it. Frequent clamps mean the idle model is too high.
	Clamped bool
}

// Split divides one zone's energy for one interval.
//
// Dynamic and idle shares are ADDED into dynamic and idle (never overwritten),
// so a caller can pass the same maps for every socket's zone and get each
// workload's sum over sockets, and can reuse the maps across intervals
// without allocation. Split writes no zero entries, so a workload that never
// ran on a socket does not appear because of that socket. dynamic must be
// non-nil whenever some usage may be positive; idle may be nil under
// IdleNone.
//
// When total usage is 0 (or there are no workloads) all dynamic energy is
// reported as UnattributedJ instead of being spread arbitrarily.
func Split[K comparable](in Interval[K], dynamic, idle map[K]float64) Result {
	energy := finiteNonNeg(in.EnergyJ)

	var r Result
	if in.IdleJ > 0 { // false for NaN
		r.IdleJ = in.IdleJ
	}
	if r.IdleJ > energy {
		r.IdleJ = energy
		r.Clamped = true
	}
	r.DynamicJ = energy - r.IdleJ

	total := usageTotal(in.Usage)
	// total can only be infinite if the usage values sum past MaxFloat64;
	// there is no meaningful share then, so it is handled like no usage,
	// which keeps the energy accounted for (as unattributed).
	attributable := total > 0 && total <= math.MaxFloat64

	// Why each share is computed independently from a compensated total,
	// rather than giving the last workload "the remainder":
	//
	//  - Map iteration order is random, so "the last workload" would be a
	//    different workload on every run: attribution would stop being
	//    deterministic, and whichever workload came last would silently
	//    absorb everyone else's rounding error (or, with a small last
	//    share and a big error, even go negative).
	//  - With total computed by Neumaier summation it is within about one
	//    ulp of the true Σ usage, independent of the number of workloads
	//    and of how many orders of magnitude the usages span. Each share is
	//    then (usage/total)·DynamicJ with two roundings, so it is within
	//    ~2 ulps of its exact value, and since the shares are non-negative
	//    and sum to DynamicJ, Σ shares is within ~3 ulps of DynamicJ in
	//    total. Every workload's number is individually right, and the
	//    parts still add up to the whole.
	//
	// u/total (<= 1) is formed before multiplying so nothing can overflow,
	// whatever the scale of the usage metric.
	var share bool
	if attributable {
		share = in.Policy == IdleShare
		for k, u := range in.Usage {
			u = finiteNonNeg(u)
			if u == 0 {
				continue
			}
			f := u / total
			if d := f * r.DynamicJ; d != 0 {
				dynamic[k] += d
			}
			if share {
				if i := f * r.IdleJ; i != 0 {
					idle[k] += i
				}
			}
		}
	} else {
		r.UnattributedJ = r.DynamicJ
	}

	// Even idle split: under IdleEven always, under IdleShare only when
	// there was no usage to share by (otherwise it was done above).
	even := in.Policy == IdleEven || (in.Policy == IdleShare && !share)
	if n := len(in.Usage); even && n > 0 && r.IdleJ > 0 {
		each := r.IdleJ / float64(n)
		for k := range in.Usage {
			idle[k] += each
		}
	}
	return r
}

// usageTotal is the Neumaier-compensated sum of the sanitised usage values.
// Plain summation loses the small usages whenever a large one is already in
// the running sum (1e9 + 1e-3 rounds to 1e9), and every bit lost in the
// denominator inflates every share, breaking conservation.
func usageTotal[K comparable](usage map[K]float64) float64 {
	var sum, c float64
	for _, u := range usage {
		u = finiteNonNeg(u)
		t := sum + u
		if sum >= u {
			c += (sum - t) + u
		} else {
			c += (u - t) + sum
		}
		sum = t
	}
	return sum + c
}

// finiteNonNeg maps negative, NaN and ±Inf to 0 and keeps everything else.
func finiteNonNeg(x float64) float64 {
	if x > 0 && x <= math.MaxFloat64 {
		return x
	}
	return 0
}
