package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/bpfloader"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/usage"
)

// ProbeSource is the optional kernel probes (page cache, softirq, block
// IO, network, perf counters); *bpfloader.Probes implements it.
type ProbeSource interface {
	Read() (bpfloader.ProbeReading, error)
	Forget(procs []usage.ProcKey, cgroups []uint64) error
	Active() []string
	Counters() []string
}

// WithProbes adds the kernel probes' counters to cgroups and processes.
func WithProbes(p ProbeSource) Option {
	return func(l *Loop) { l.probes = p }
}

// absorbProbes adds each cgroup's and process's probe counters since the
// last read to its workload. The maps are cumulative per cgroup id and per
// process, like the CPU accounting, and keyed alike.
func (l *Loop) absorbProbes(dead []usage.ProcKey) {
	if l.probes == nil {
		return
	}
	read := l.probes.Read
	if c, ok := l.probes.(interface {
		ReadCgroups() (bpfloader.ProbeReading, error)
	}); ok && !l.countersSplit() {
		// Per-process counts only matter to a counter split.
		read = c.ReadCgroups
	}
	r, err := read()
	if err != nil {
		l.log.Warn("read kernel probes", zap.Error(err))
		return
	}
	l.softirqs = r.Softirqs
	counters := l.probes.Counters()
	credit := func(use map[string]map[*wstate]float64, w *wstate, d *snapshot.ProbeStats) {
		for i, name := range counters {
			if i >= len(d.Counters) || d.Counters[i] == 0 {
				continue
			}
			m := use[name]
			if m == nil {
				m = map[*wstate]float64{}
				use[name] = m
			}
			m[w] += float64(d.Counters[i])
		}
	}
	for i := range r.Cgroups {
		c := &r.Cgroups[i]
		cs := l.cgIDs[c.ID]
		if cs == nil || cs.w == nil {
			continue // its CPU accounting shows up first
		}
		d := c.ProbeStats.Delta(cs.probePrev)
		cs.probePrev = c.ProbeStats
		if cs.w.w.Probes == nil {
			cs.w.w.Probes = &snapshot.ProbeStats{}
		}
		cs.w.w.Probes.Add(d)
		credit(l.cgCounterUse, cs.w, &d)
	}
	// Per-process probe counters are exported nowhere (processes export
	// energy and CPU only); they matter when a zone is split by a perf
	// counter, so they are followed only then.
	if l.countersSplit() {
		for i := range r.Processes {
			p := &r.Processes[i]
			w := l.procs[p.Key]
			if w == nil {
				continue
			}
			if w.probePrev == nil {
				w.probePrev = &snapshot.ProbeStats{}
			}
			d := p.ProbeStats.Delta(*w.probePrev)
			*w.probePrev = p.ProbeStats
			credit(l.procCounterUse, w, &d)
		}
	}
	// A process's last probe counts were read above; its entries go with it.
	if err := l.probes.Forget(dead, l.goneIDs); err != nil {
		l.log.Warn("forget probe entries", zap.Error(err))
	}
	l.goneIDs = l.goneIDs[:0]
}

// countersSplit reports whether some zone is split by a perf counter.
func (l *Loop) countersSplit() bool {
	for _, m := range l.cfg.UsageMetric {
		if m != "" && m != "cpu_time" {
			return true
		}
	}
	return false
}
