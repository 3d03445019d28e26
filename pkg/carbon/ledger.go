package carbon

import (
	"fmt"
	"math"
)

// Ledger accumulates grams of CO2e per key (a workload, the node, the
// node's idle share) and provider, interval by interval: each interval's
// joules are multiplied by the factor in force for that interval, never by
// an average over a window. Because Grams is linear, grams conserve
// exactly as the joules do: if Σ workloads' joules + idle joules = node
// joules in every interval, Σ workloads' grams + idle grams = node grams.
// Sums are compensated (Neumaier), so that months of one-second intervals
// add no drift beyond a few ulps.
//
// A Ledger is not safe for concurrent use: the stats loop owns it.
type Ledger[K comparable] struct {
	sums map[ledgerKey[K]]*ksum
}

type ledgerKey[K comparable] struct {
	key      K
	provider string
}

// ksum is a Neumaier compensated sum.
type ksum struct{ s, c float64 }

func (k *ksum) add(x float64) {
	t := k.s + x
	if math.Abs(k.s) >= math.Abs(x) {
		k.c += (k.s - t) + x
	} else {
		k.c += (x - t) + k.s
	}
	k.s = t
}

func (k *ksum) value() float64 { return k.s + k.c }

// NewLedger returns an empty ledger.
func NewLedger[K comparable]() *Ledger[K] {
	return &Ledger[K]{sums: map[ledgerKey[K]]*ksum{}}
}

// Credit adds joules of key's energy in one interval at factor f and
// returns the grams credited. Joules must be finite and not negative (the
// stats stage has validated them); anything else is refused and credits
// nothing.
func (l *Ledger[K]) Credit(key K, joules float64, f Factor) (float64, error) {
	if math.IsNaN(joules) || math.IsInf(joules, 0) || joules < 0 {
		return 0, fmt.Errorf("carbon: refusing %g J for %v", joules, key)
	}
	g := f.Grams(joules)
	k := ledgerKey[K]{key, f.Provider}
	s := l.sums[k]
	if s == nil {
		s = &ksum{}
		l.sums[k] = s
	}
	s.add(g)
	return g, nil
}

// Grams is key's cumulative grams under provider.
func (l *Ledger[K]) Grams(key K, provider string) float64 {
	if s := l.sums[ledgerKey[K]{key, provider}]; s != nil {
		return s.value()
	}
	return 0
}

// Total is key's cumulative grams under every provider.
func (l *Ledger[K]) Total(key K) float64 {
	var t ksum
	for k, s := range l.sums {
		if k.key == key {
			t.add(s.value())
		}
	}
	return t.value()
}

// Each calls fn for every key and provider with its cumulative grams, in
// no particular order.
func (l *Ledger[K]) Each(fn func(key K, provider string, grams float64)) {
	for k, s := range l.sums {
		fn(k.key, k.provider, s.value())
	}
}

// Forget drops key (a workload gone for good) under every provider.
func (l *Ledger[K]) Forget(key K) {
	for k := range l.sums {
		if k.key == key {
			delete(l.sums, k)
		}
	}
}

// Len is the number of (key, provider) series held.
func (l *Ledger[K]) Len() int { return len(l.sums) }
