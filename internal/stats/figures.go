package stats

import (
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// figures are the additive figures of a consumer or a workload: cumulative,
// summed when cgroup ids merge into one path (the ledger), passed on to
// workloads as their growth (the roll-up) and copied into a consumer's
// published record when they changed (retention). Those three only ever call the methods below, so a new
// additive figure is a field here and its line in each method of this
// file; TestFiguresCoverEveryField fails on a method that misses one.
type figures struct {
	CPUSeconds      float64
	ContextSwitches uint64
	// Energy is by zone series (zone name, source, method), summed over
	// sockets.
	Energy snapshot.Energy
	// Grams are the emissions of that energy; nil without emissions.
	Grams snapshot.Emissions
	// Probes are the kernel probes' counters; nil without probes (and for
	// processes, whose series don't carry them).
	Probes *reading.ProbeStats
}

// add adds d to f.
func (f *figures) add(d *figures) {
	f.CPUSeconds += d.CPUSeconds
	f.ContextSwitches += d.ContextSwitches
	for _, e := range d.Energy {
		f.Energy = f.Energy.Add(e.Series(), e.DynamicJ, e.IdleJ)
	}
	for _, g := range d.Grams {
		f.Grams = f.Grams.Add(g.Provider, g.Zone, g.DynamicG, g.IdleG)
	}
	if d.Probes != nil {
		if f.Probes == nil {
			f.Probes = &reading.ProbeStats{}
		}
		f.Probes.Add(*d.Probes)
	}
}

// growth sets d to f's growth since prev (a copy of f taken earlier by
// keep), reusing d's slices; d.Probes stays nil when f has no probes.
func (f *figures) growth(prev *figures, d *figures) {
	d.CPUSeconds = f.CPUSeconds - prev.CPUSeconds
	d.ContextSwitches = f.ContextSwitches - prev.ContextSwitches
	d.Energy = d.Energy[:0]
	for _, e := range f.Energy {
		p := prev.Energy.Series(e.Series())
		d.Energy = d.Energy.Add(e.Series(), e.DynamicJ-p.DynamicJ, e.IdleJ-p.IdleJ)
	}
	d.Grams = d.Grams[:0]
	for _, g := range f.Grams {
		p := prev.Grams.Get(g.Provider, g.Zone)
		d.Grams = d.Grams.Add(g.Provider, g.Zone, g.DynamicG-p.DynamicG, g.IdleG-p.IdleG)
	}
	d.Probes = nil
	if f.Probes != nil {
		var base reading.ProbeStats
		if prev.Probes != nil {
			base = *prev.Probes
		}
		delta := f.Probes.Delta(base)
		d.Probes = &delta
	}
}

// keep makes dst a copy of f, reusing dst's slices: what has been passed
// on so far, for the next growth.
func (f *figures) keep(dst *figures) {
	dst.CPUSeconds = f.CPUSeconds
	dst.ContextSwitches = f.ContextSwitches
	dst.Energy = append(dst.Energy[:0], f.Energy...)
	dst.Grams = append(dst.Grams[:0], f.Grams...)
	switch {
	case f.Probes == nil:
		dst.Probes = nil
	case dst.Probes == nil:
		p := *f.Probes
		dst.Probes = &p
	default:
		*dst.Probes = *f.Probes
	}
}

// clone is a copy of f that shares nothing with it: what a snapshot gets.
func (f *figures) clone() figures {
	c := figures{
		CPUSeconds:      f.CPUSeconds,
		ContextSwitches: f.ContextSwitches,
		Energy:          append(snapshot.Energy(nil), f.Energy...),
		Grams:           append(snapshot.Emissions(nil), f.Grams...),
	}
	if f.Probes != nil {
		p := *f.Probes
		c.Probes = &p
	}
	return c
}

// without drops from f (a clone) the energy of the series in gone: the
// zone series whose consumers' and workloads' series are no longer
// published (interval.gone).
func (f figures) without(gone map[snapshot.ZoneSeries]bool) figures {
	if len(gone) == 0 {
		return f
	}
	e := f.Energy[:0]
	for _, z := range f.Energy {
		if !gone[z.Series()] {
			e = append(e, z)
		}
	}
	f.Energy = e
	return f
}

// consumer publishes f (a clone) into a snapshot's consumer.
func (f figures) consumer(c *snapshot.Consumer) {
	c.CPUSeconds, c.ContextSwitches, c.Energy, c.Grams, c.Probes = f.CPUSeconds, f.ContextSwitches, f.Energy, f.Grams, f.Probes
}

// workload publishes f (a clone) into a snapshot's workload.
func (f figures) workload(u *snapshot.Workload) {
	u.CPUSeconds, u.ContextSwitches, u.Energy, u.Grams, u.Probes = f.CPUSeconds, f.ContextSwitches, f.Energy, f.Grams, f.Probes
}
