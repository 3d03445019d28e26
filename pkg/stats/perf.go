package stats

import (
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/usage"
)

// Profiler counts perf events for the processes that opted in;
// *profiling.Profiler implements it.
type Profiler interface {
	// Scan follows the complete process list and returns the final counts
	// of the processes that ended, once each.
	Scan(procs []usage.Process) []snapshot.ProcessCounts
	// Read returns the live processes' cumulative counts.
	Read() []snapshot.ProcessCounts
	Events() []snapshot.PerfEvent
}

// WithProfiler adds the opted-in processes' perf counts to their cgroups.
func WithProfiler(p Profiler) Option {
	return func(l *Loop) { l.perf = &perf{src: p} }
}

// perf is the stage that sums the opted-in processes' counts per cgroup:
// the final counts of those that ended (kept, so a cgroup's counts never
// drop when one of its processes exits) plus the live ones'.
type perf struct {
	src Profiler
}

func (p *perf) absorb(led *ledger, r usage.Reading) {
	for _, pc := range p.src.Scan(r.Processes) {
		cs := led.cgroupOf(pc.Cgroup)
		if cs == nil {
			continue
		}
		if cs.w.perfDone == nil {
			cs.w.perfDone = map[string]float64{}
		}
		for ev, v := range pc.Counts {
			cs.w.perfDone[ev] += v
		}
	}
	for _, w := range led.byPath {
		w.w.Perf = nil
		if w.perfDone != nil {
			w.w.Perf = make(map[string]float64, len(w.perfDone))
			for ev, v := range w.perfDone {
				w.w.Perf[ev] = v
			}
		}
	}
	for _, pc := range p.src.Read() {
		cs := led.cgroupOf(pc.Cgroup)
		if cs == nil {
			continue
		}
		if cs.w.w.Perf == nil {
			cs.w.w.Perf = map[string]float64{}
		}
		for ev, v := range pc.Counts {
			cs.w.w.Perf[ev] += v
		}
	}
}

func (p *perf) publish(s *snapshot.Snapshot) { s.PerfEvents = p.src.Events() }
