package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/usage"
)

// ProbeSource is the optional kernel probes (page cache, softirq, block
// IO, network, perf counters); *bpfloader.Probes implements it.
type ProbeSource interface {
	Read() (snapshot.ProbeReading, error)
	Forget(procs []usage.ProcKey, cgroups []uint64) error
	Active() []string
	Counters() []string
}

// cgroupsOnlyReader is implemented by probe sources that can skip the
// per-process counters (*bpfloader.Probes).
type cgroupsOnlyReader interface {
	ReadCgroups() (snapshot.ProbeReading, error)
}

// WithProbes adds the kernel probes' counters to cgroups and processes.
func WithProbes(p ProbeSource) Option {
	return func(l *Loop) { l.probes = &probes{src: p} }
}

// probes is the stage that adds each cgroup's and process's probe counters
// since the last read to its consumer and credits the perf counters'
// events to the split. The maps are cumulative per cgroup id and per
// process, like the CPU accounting, and keyed alike.
type probes struct {
	src      ProbeSource
	softirqs []snapshot.SoftirqVector
}

// absorb reads the probes. perProcess is true when a zone is split by a
// perf counter: only then do per-process counts matter (processes export
// energy and CPU only), and on a node with thousands of processes walking
// their map costs CPU and garbage for nothing.
func (p *probes) absorb(led *ledger, use *shares, dead []usage.ProcKey, perProcess bool, log *zap.Logger) {
	read := p.src.Read
	if c, ok := p.src.(cgroupsOnlyReader); ok && !perProcess {
		read = c.ReadCgroups
	}
	r, err := read()
	if err != nil {
		log.Warn("read kernel probes", zap.Error(err))
		return
	}
	p.softirqs = r.Softirqs
	counters := p.src.Counters()
	for i := range r.Cgroups {
		c := &r.Cgroups[i]
		cs := led.cgroupOf(c.ID)
		if cs == nil {
			continue // its CPU accounting shows up first
		}
		d := c.ProbeStats.Delta(cs.probePrev)
		cs.probePrev = c.ProbeStats
		if cs.w.w.Probes == nil {
			cs.w.w.Probes = &snapshot.ProbeStats{}
		}
		cs.w.w.Probes.Add(d)
		use.credit(true, cs.w, counters, d.Counters[:])
	}
	if perProcess {
		for i := range r.Processes {
			pr := &r.Processes[i]
			w := led.procs[pr.Key]
			if w == nil {
				continue
			}
			if w.probePrev == nil {
				w.probePrev = &snapshot.ProbeStats{}
			}
			d := pr.ProbeStats.Delta(*w.probePrev)
			*w.probePrev = pr.ProbeStats
			use.credit(false, w, counters, d.Counters[:])
		}
	}
	// A process's last probe counts were read above; its entries go with it.
	if err := p.src.Forget(dead, led.goneIDs); err != nil {
		log.Warn("forget probe entries", zap.Error(err))
	}
	led.goneIDs = led.goneIDs[:0]
}

func (p *probes) publish(s *snapshot.Snapshot) {
	s.Probes = p.src.Active()
	s.Counters = p.src.Counters()
	s.Softirqs = append([]snapshot.SoftirqVector(nil), p.softirqs...)
}
