package stats

import (
	"maps"
	"slices"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// tracked is what retention needs to know of a consumer or workload.
type tracked interface {
	// liveness says whether it is alive, whether the latest reading still
	// reported it, and when it was last seen alive.
	liveness() (alive, seen bool, lastSeen time.Time)
}

// retained walks m and returns the entries to publish: the live ones and
// those that ended less than retention ago. An entry past retention leaves
// the snapshot; its state is forgotten (and onDrop told) unless its source
// still reports it, so that its counters can't restart while it does.
func retained[K comparable, V tracked](m map[K]V, now time.Time, retention time.Duration, onDrop func(V)) []V {
	out := make([]V, 0, len(m))
	eachRetained(m, now, retention, onDrop, func(v V) { out = append(out, v) })
	return out
}

// eachRetained is retained handing each entry to keep instead of a slice.
func eachRetained[K comparable, V tracked](m map[K]V, now time.Time, retention time.Duration, onDrop func(V), keep func(V)) {
	for k, v := range m {
		alive, seen, last := v.liveness()
		if alive || now.Sub(last) <= retention {
			keep(v)
			continue
		}
		if !seen {
			if onDrop != nil {
				onDrop(v)
			}
			delete(m, k)
		}
	}
}

func (w *consumer) liveness() (bool, bool, time.Time) { return w.w.Alive, w.seen, w.w.LastSeen }

// retain publishes the retained consumers of m into out: each one's
// record (record), without its series of the zone series in gone
// (interval.gone).
func retain[K comparable](m map[K]*consumer, now time.Time, retention time.Duration, gone map[snapshot.ZoneSeries]bool,
	out []*snapshot.Consumer, onDrop func(*consumer)) []*snapshot.Consumer {
	out = slices.Grow(out, len(m))
	eachRetained(m, now, retention, onDrop, func(w *consumer) { out = append(out, w.record(gone)) })
	return out
}

// record is w's published record: the one published last when nothing of
// it has changed since, else a new one, a copy the loop won't touch again.
// Most processes of a node sleep through most steps, so a snapshot shares
// nearly all its records with the last one instead of copying every
// consumer at every step.
func (w *consumer) record(gone map[snapshot.ZoneSeries]bool) *snapshot.Consumer {
	if w.pub != nil && w.unchangedSince(w.pub, gone) {
		return w.pub
	}
	c := w.w
	w.f.clone().without(gone).consumer(&c)
	c.Perf = maps.Clone(w.w.Perf)
	w.pub = &c
	return w.pub
}

// unchangedSince reports whether w's record, without the series in gone,
// would say what pub says. A live consumer's LastSeen moves at every step
// it is seen and is left out: nothing reads it before the consumer ends,
// when Alive changes and with it the record.
func (w *consumer) unchangedSince(pub *snapshot.Consumer, gone map[snapshot.ZoneSeries]bool) bool {
	c, f := &w.w, &w.f
	if c.Cgroup != pub.Cgroup || c.CgroupID != pub.CgroupID || c.PID != pub.PID || c.Comm != pub.Comm ||
		c.Alive != pub.Alive || c.InWorkload != pub.InWorkload || (!c.Alive && !c.LastSeen.Equal(pub.LastSeen)) {
		return false
	}
	if f.CPUSeconds != pub.CPUSeconds || f.ContextSwitches != pub.ContextSwitches ||
		!sameEnergy(f.Energy, pub.Energy, gone) || !slices.Equal(f.Grams, pub.Grams) {
		return false
	}
	if (f.Probes == nil) != (pub.Probes == nil) || (f.Probes != nil && *f.Probes != *pub.Probes) {
		return false
	}
	return maps.Equal(c.Perf, pub.Perf) && (c.Perf == nil) == (pub.Perf == nil)
}

// sameEnergy reports whether e without the series in gone is pub.
func sameEnergy(e, pub snapshot.Energy, gone map[snapshot.ZoneSeries]bool) bool {
	if len(gone) == 0 {
		return slices.Equal(e, pub)
	}
	i := 0
	for _, z := range e {
		if gone[z.Series()] {
			continue
		}
		if i == len(pub) || pub[i] != z {
			return false
		}
		i++
	}
	return i == len(pub)
}
