package stats

import (
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
	for k, v := range m {
		alive, seen, last := v.liveness()
		if alive || now.Sub(last) <= retention {
			out = append(out, v)
			continue
		}
		if !seen {
			if onDrop != nil {
				onDrop(v)
			}
			delete(m, k)
		}
	}
	return out
}

func (w *consumer) liveness() (bool, bool, time.Time) { return w.w.Alive, w.seen, w.w.LastSeen }

// retain publishes the retained consumers of m into out, each a copy the
// loop won't touch again, without their series of the zone series in gone
// (interval.gone).
func retain[K comparable](m map[K]*consumer, now time.Time, retention time.Duration, gone map[snapshot.ZoneSeries]bool,
	out []snapshot.Consumer, onDrop func(*consumer)) []snapshot.Consumer {
	for _, w := range retained(m, now, retention, onDrop) {
		c := w.w
		w.f.clone().without(gone).consumer(&c)
		if w.w.Perf != nil {
			c.Perf = make(map[string]float64, len(w.w.Perf))
			for k, v := range w.w.Perf {
				c.Perf[k] = v
			}
		}
		out = append(out, c)
	}
	return out
}
