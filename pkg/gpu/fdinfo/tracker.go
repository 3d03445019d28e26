package fdinfo

import (
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Usage is one device's per-process usage for one interval.
type Usage struct {
	// ByPID is pid → busy nanoseconds summed over engine classes (xe:
	// busy GPU cycles, comparable among the device's clients).
	ByPID map[int]float64
	// Utilization is the busiest engine class's busy share, 0..1.
	Utilization float64
}

// Tracker turns successive scans into per-interval usage. Every client
// counter passes a reading.Counter: busy time cannot fall, nor grow faster
// than wall time × the class's engine count. Not safe for concurrent use.
type Tracker struct {
	rejects *reading.Rejects
	clients map[ClientKey]*clientState
	last    time.Time
	started bool
	out     map[string]*Usage
	classes map[string]map[string]float64 // pdev → class → busy share
}

type clientState struct {
	busy, cycles, total map[string]*reading.Counter
	seen                bool
}

// NewTracker counts rejected client readings in rejects.
func NewTracker(rejects *reading.Rejects) *Tracker {
	return &Tracker{rejects: rejects, clients: map[ClientKey]*clientState{},
		out: map[string]*Usage{}, classes: map[string]map[string]float64{}}
}

// Update takes a scan made at now and returns each device's (by drm-pdev)
// usage since the previous scan. A client that appeared since then is
// counted from zero, so a short-lived job is not missed; the first scan
// is a baseline and returns no usage. The returned maps are reused by
// the next Update.
func (t *Tracker) Update(clients map[ClientKey]*Client, now time.Time) map[string]*Usage {
	for _, u := range t.out {
		clear(u.ByPID)
		u.Utilization = 0
	}
	for _, c := range t.classes {
		clear(c)
	}
	first := !t.started
	prevT := t.last
	t.started, t.last = true, now
	dt := now.Sub(prevT).Seconds()
	for k, c := range clients {
		st := t.clients[k]
		fresh := st == nil
		if fresh {
			st = &clientState{busy: map[string]*reading.Counter{}, cycles: map[string]*reading.Counter{},
				total: map[string]*reading.Counter{}}
			t.clients[k] = st
		}
		st.seen = true
		u := t.out[c.PDev]
		if u == nil {
			u = &Usage{ByPID: map[int]float64{}}
			t.out[c.PDev] = u
			t.classes[c.PDev] = map[string]float64{}
		}
		cls := t.classes[c.PDev]
		var w float64
		for class, ns := range c.Busy {
			capa := float64(max(c.Capacity[class], 1))
			d, ok := t.observe(st.busy, class, float64(ns), capa*1e9*1.01, fresh && !first, prevT, now, k)
			if ok && dt > 0 {
				w += d
				cls[class] += d / (dt * 1e9 * capa)
			}
		}
		for class, cy := range c.Cycles {
			d, ok := t.observe(st.cycles, class, float64(cy), 0, fresh && !first, prevT, now, k)
			tot, okT := t.observe(st.total, class, float64(c.TotalCycles[class]), 0, fresh && !first, prevT, now, k)
			capa := float64(max(c.Capacity[class], 1))
			if ok && okT && tot > 0 {
				if d > tot*capa {
					t.rejects.Add(reading.Reject(reading.TooFast, d, "busy cycles above elapsed"), "fdinfo cycles")
					continue
				}
				w += d
				cls[class] += d / (tot * capa)
			}
		}
		if w > 0 && !first {
			u.ByPID[c.PID] += w
		}
	}
	for k, st := range t.clients {
		if !st.seen {
			delete(t.clients, k)
		}
		st.seen = false
	}
	for pdev, cls := range t.classes {
		var m float64
		for _, s := range cls {
			m = max(m, s)
		}
		t.out[pdev].Utilization = min(m, 1)
	}
	return t.out
}

// observe feeds one counter; a client new since the previous scan starts
// from zero at that scan.
func (t *Tracker) observe(m map[string]*reading.Counter, class string, v, rate float64, fromZero bool,
	prevT, now time.Time, k ClientKey) (float64, bool) {
	c := m[class]
	if c == nil {
		c = &reading.Counter{MaxRate: rate}
		m[class] = c
		// A client first seen now opened since the last scan, unless it
		// was found late (see DefaultRescanEvery): count from zero only
		// what fits in the interval, else take it as a baseline, so a
		// late find is neither rejected nor credited its whole history.
		if fromZero && (rate <= 0 || v <= rate*now.Sub(prevT).Seconds()) {
			c.Observe(0, prevT)
		}
	}
	d, err := c.Observe(v, now)
	if err != nil {
		t.rejects.Add(err, "fdinfo "+k.PDev+" "+class)
		return 0, false
	}
	return d, true
}
