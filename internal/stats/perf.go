package stats

import (
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Profiler counts perf events for the processes that opted in;
// *profiling.Profiler implements it.
type Profiler interface {
	// Scan follows the complete process list and returns the final counts
	// of the processes that ended, once each.
	Scan(procs []reading.ProcessUsage) []reading.ProcessCounts
	// Read returns the live processes' cumulative counts.
	Read() []reading.ProcessCounts
	Events() []reading.PerfEvent
}

// WithProfiler adds the opted-in processes' perf counts to their cgroups.
func WithProfiler(p Profiler) Option {
	return func(o *parts) { o.profiler = p }
}

// perf is the stage that sums the opted-in processes' counts per cgroup:
// the final counts of those that ended (kept, so a cgroup's counts never
// drop when one of its processes exits) plus the live ones'.
type perf struct {
	phases
	src Profiler
	led consumers
	// done is a cgroup's counts of opted-in processes that ended.
	done map[*consumer]map[string]float64
}

func makePerf(d *deps) (stage, error) {
	if d.opts.profiler == nil {
		return nil, nil
	}
	return &perf{src: d.opts.profiler, led: d.consumers, done: map[*consumer]map[string]float64{}}, nil
}

func (p *perf) absorb(iv *interval) {
	for w := range p.done {
		if w.gone {
			delete(p.done, w)
		}
	}
	for _, pc := range p.src.Scan(iv.reading.Processes) {
		w := p.led.cgroup(pc.Cgroup)
		if w == nil {
			continue
		}
		done := p.done[w]
		if done == nil {
			done = map[string]float64{}
			p.done[w] = done
		}
		for ev, v := range pc.Counts {
			done[ev] += v
		}
	}
	for w := range p.led.cgroups() {
		w.w.Perf = nil
		if done := p.done[w]; done != nil {
			w.w.Perf = make(map[string]float64, len(done))
			for ev, v := range done {
				w.w.Perf[ev] = v
			}
		}
	}
	for _, pc := range p.src.Read() {
		w := p.led.cgroup(pc.Cgroup)
		if w == nil {
			continue
		}
		if w.w.Perf == nil {
			w.w.Perf = map[string]float64{}
		}
		for ev, v := range pc.Counts {
			w.w.Perf[ev] += v
		}
	}
}

func (p *perf) publish(_ *interval, s *snapshot.Snapshot) { s.PerfEvents = p.src.Events() }
