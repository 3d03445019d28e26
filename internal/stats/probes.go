package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// ProbeSource is the optional kernel probes (page cache, softirq, block
// IO, network, perf counters); *bpfloader.Probes implements it.
type ProbeSource interface {
	Read() (reading.ProbeReading, error)
	Forget(procs []reading.ProcKey, cgroups []uint64) error
	Active() []string
	Counters() []string
}

// cgroupsOnlyReader is implemented by probe sources that can skip the
// per-process counters (*bpfloader.Probes).
type cgroupsOnlyReader interface {
	ReadCgroups() (reading.ProbeReading, error)
}

// WithProbes adds the kernel probes' counters to cgroups and processes.
func WithProbes(p ProbeSource) Option {
	return func(o *parts) { o.probes = p }
}

// probes is the stage that adds each cgroup's and process's probe counters
// since the last read to its consumer and credits the perf counters'
// events to the split. The maps are cumulative per cgroup id and per
// process, like the CPU accounting, and keyed alike.
type probes struct {
	phases
	src ProbeSource
	led consumers
	use *shares
	// perProcess is true when a zone is split by a perf counter: only then
	// do per-process counts matter (processes export energy and CPU
	// only), and on a node with thousands of processes walking their map
	// costs CPU and garbage for nothing.
	perProcess bool
	log        *zap.Logger
	softirqs   []reading.SoftirqVector
	// cgPrev and procPrev are each cgroup id's and process's last reading.
	cgPrev   map[uint64]reading.ProbeStats
	procPrev map[reading.ProcKey]reading.ProbeStats
	// gone are the cgroup ids the ledger dropped whose entries are not
	// forgotten yet (a failed read keeps them for the next).
	gone []uint64
}

func makeProbes(d *deps) (stage, error) {
	if d.opts.probes == nil {
		return nil, nil
	}
	return &probes{src: d.opts.probes, led: d.consumers, use: d.use, log: d.log,
		perProcess: splitsByCounter(d.cfg.UsageMetric),
		cgPrev:     map[uint64]reading.ProbeStats{}, procPrev: map[reading.ProcKey]reading.ProbeStats{}}, nil
}

func (p *probes) absorb(iv *interval) {
	led, use, log := p.led, p.use, p.log
	dead := deadProcs(iv.reading)
	read := p.src.Read
	if c, ok := p.src.(cgroupsOnlyReader); ok && !p.perProcess {
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
		w := led.cgroup(c.ID)
		if w == nil {
			continue // its CPU accounting shows up first
		}
		d := c.ProbeStats.Delta(p.cgPrev[c.ID])
		p.cgPrev[c.ID] = c.ProbeStats
		if w.f.Probes == nil {
			w.f.Probes = &reading.ProbeStats{}
		}
		w.f.Probes.Add(d)
		use.credit(true, w, counters, d.Counters[:])
	}
	if p.perProcess {
		for i := range r.Processes {
			pr := &r.Processes[i]
			w := led.process(pr.Key)
			if w == nil {
				continue
			}
			d := pr.ProbeStats.Delta(p.procPrev[pr.Key])
			p.procPrev[pr.Key] = pr.ProbeStats
			use.credit(false, w, counters, d.Counters[:])
		}
		for _, k := range dead {
			delete(p.procPrev, k)
		}
		for k := range p.procPrev {
			if led.process(k) == nil {
				delete(p.procPrev, k)
			}
		}
	}
	// A process's last probe counts were read above; its entries go with it.
	if err := p.src.Forget(dead, p.gone); err != nil {
		log.Warn("forget probe entries", zap.Error(err))
	}
	p.gone = p.gone[:0]
}

// publish, after the ledger's (which forgets cgroups), also forgets the
// dropped cgroups' last readings, so that a later reading of the same id
// counts afresh; the next absorb forgets their entries in the maps.
func (p *probes) publish(_ *interval, s *snapshot.Snapshot) {
	for _, id := range p.led.droppedCgroups() {
		delete(p.cgPrev, id)
		p.gone = append(p.gone, id)
	}
	s.Probes = p.src.Active()
	s.Counters = p.src.Counters()
	s.Softirqs = append([]reading.SoftirqVector(nil), p.softirqs...)
}
