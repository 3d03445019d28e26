package collector

import (
	"container/heap"
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/snapshot"
)

// NameProcess is the collector of per-process series.
const NameProcess = "process"

func init() {
	register(withSettings(Registration{Name: NameProcess, Flag: true, DefaultOn: true,
		Help: "Enable the process collector: per-process series for the top collector.process.top processes by energy.",
		new: func(o Options) subCollector {
			return newProcessCollector(settingsOf[ProcessSettings](o, NameProcess).Top, o.IdleAttributed)
		}}, func(s *setting.Set, o *ProcessSettings) {
		s.Int(&o.Top, "collector.process.top", 20, "Export only the N processes with the most energy. 0 = all.", 0, "must be >= 0 (0 = all)")
	}))
}

// ProcessSettings are the process collector's own settings.
type ProcessSettings struct {
	// Top is collector.process.top: how many processes, by energy, are
	// exported (0: all). The GPU and emissions collectors, and the loop's
	// ended processes, follow it.
	Top int
}

// Process returns the process collector's settings.
func (st Settings) Process() *ProcessSettings {
	return settingsOf[ProcessSettings](Options{Settings: st}, NameProcess)
}

// processCollector exports per-process series for the top N processes by
// energy. Per-process series are high-cardinality, so the collector is off
// by default and bounded by N when on.
type processCollector struct {
	energy, cpu, switches *desc
	top                   int
	idle                  bool
}

func newProcessCollector(top int, idleAttributed bool) *processCollector {
	labels := []string{"pid", "comm", "cgroup"}
	return &processCollector{
		top:      top,
		idle:     idleAttributed,
		energy:   newDesc("process", "energy_joules_total", "Energy attributed to the process (all its threads, exited ones included); mode as for wattrace_cgroup_energy_joules_total. Only the top N processes by energy are exported.", append(labels, "zone", "source", "method", "mode")...),
		cpu:      newDesc("process", "cpu_seconds_total", "CPU time used by the process, all threads included.", labels...),
		switches: newDesc("process", "context_switches_total", "Voluntary and involuntary context switches of the process's threads.", labels...),
	}
}

func (c *processCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.energy, c.cpu, c.switches)
}

func (c *processCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	zl := newZoneLabels(snap.Zones)
	for _, a := range topN(aggregate(candidates(snap.Processes, c.top), true), c.top) {
		pid := strconv.FormatUint(uint64(a.key.pid), 10)
		emitEnergy(out, c.energy, a, zl, c.idle, pid, a.key.comm, a.key.cgroup)
		out.add(c.cpu, prometheus.CounterValue, a.cpuSeconds, pid, a.key.comm, a.key.cgroup)
		out.add(c.switches, prometheus.CounterValue, float64(a.switches), pid, a.key.comm, a.key.cgroup)
	}
	return nil
}

// less orders workloads by total energy, ties broken by the label set so the
// selection is deterministic between scrapes.
func less(a, b *seriesAgg) bool { return lessBy(a.total, a.key, b.total, b.key) }

func lessBy(ta float64, ka seriesKey, tb float64, kb seriesKey) bool {
	if ta != tb {
		return ta < tb
	}
	if ka.pid != kb.pid {
		return ka.pid > kb.pid // lower PID ranks higher on ties
	}
	if ka.comm != kb.comm {
		return ka.comm > kb.comm
	}
	return ka.cgroup > kb.cgroup
}

// topN returns the n workloads with the most energy, most first; n == 0
// returns all (unordered). A bounded min-heap makes this O(len·log n) rather
// than sorting thousands of processes every scrape to keep 20.
func topN(ws []*seriesAgg, n int) []*seriesAgg {
	if n == 0 || n >= len(ws) {
		return ws
	}
	h := make(minHeap, 0, n)
	for _, w := range ws {
		if len(h) < n {
			heap.Push(&h, w)
			continue
		}
		if less(h[0], w) {
			h[0] = w
			heap.Fix(&h, 0)
		}
	}
	out := []*seriesAgg(h)
	sort.Slice(out, func(i, j int) bool { return less(out[j], out[i]) })
	return out
}

// minHeap keeps the smallest of the current top n at index 0.
type minHeap []*seriesAgg

func (h minHeap) Len() int           { return len(h) }
func (h minHeap) Less(i, j int) bool { return less(h[i], h[j]) }
func (h minHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *minHeap) Push(x any)        { *h = append(*h, x.(*seriesAgg)) }
func (h *minHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// candidates narrows thousands of processes to those that can be in the
// top n before anything is allocated per process: the n with the most
// energy of their own, plus every other process sharing a label set with
// one of them (a reused PID), whose counters aggregate will merge in.
// Ranking by each process's own energy can differ from ranking merged
// label sets only when a PID is reused with the same comm and cgroup within
// the retention, and then only at the edge of the top n.
func candidates(ws []*snapshot.Consumer, n int) []*snapshot.Consumer {
	if n == 0 || n >= len(ws) {
		return ws
	}
	h := make(rankHeap, 0, n)
	for i := range ws {
		r := rank{total: energyTotal(ws[i].Energy), key: seriesKey{pid: ws[i].PID, comm: ws[i].Comm, cgroup: ws[i].Cgroup}}
		if len(h) < n {
			heap.Push(&h, r)
		} else if h.less(h[0], r) {
			h[0] = r
			heap.Fix(&h, 0)
		}
	}
	keys := make(keySet, n)
	for _, r := range h {
		keys.add(r.key)
	}
	out := make([]*snapshot.Consumer, 0, n)
	for i := range ws {
		if keys.has(ws[i]) {
			out = append(out, ws[i])
		}
	}
	return out
}

// keySet is a few process label sets, looked up by PID first: checking
// thousands of processes against it costs a lookup of a number each, not
// a hash of each one's comm and cgroup (which was most of candidates).
type keySet map[uint32][]seriesKey

func (s keySet) add(k seriesKey) { s[k.pid] = append(s[k.pid], k) }

// has reports whether the process w's label set is in s.
func (s keySet) has(w *snapshot.Consumer) bool {
	for _, k := range s[w.PID] {
		if k.comm == w.Comm && k.cgroup == w.Cgroup {
			return true
		}
	}
	return false
}

func energyTotal(e snapshot.Energy) float64 {
	var t float64
	for _, z := range e {
		t += z.DynamicJ + z.IdleJ
	}
	return t
}

type rank struct {
	total float64
	key   seriesKey
}

// rankHeap keeps the smallest of the current top n at index 0, with the
// same tie-break as less.
type rankHeap []rank

func (h rankHeap) less(a, b rank) bool { return lessBy(a.total, a.key, b.total, b.key) }
func (h rankHeap) Len() int            { return len(h) }
func (h rankHeap) Less(i, j int) bool  { return h.less(h[i], h[j]) }
func (h rankHeap) Swap(i, j int)       { h[i], h[j] = h[j], h[i] }
func (h *rankHeap) Push(x any)         { *h = append(*h, x.(rank)) }
func (h *rankHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
