package bpfloader

import (
	"fmt"
	"io"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
)

// The probes' events add to per-task counters in task storage; these
// programs fold them into the cumulative per-process and per-cgroup maps
// that Read returns (see bpf/fold.h): the accounting's task iterator, or
// this file's when the accounting has not walked since the last read, and
// the exit and free hooks for a task's remainder.
var foldHooks = []hook{
	{prog: "fold_exit", tracepoint: "sched_process_exit"},
	{prog: "fold_free", tracepoint: "sched_process_free"},
}

const foldIterProg = "fold_tasks"

// loadFold loads and attaches the folds against the shared maps. Without
// them no per-process or per-cgroup figure would ever reach the maps, so a
// failure here is LoadProbes' error, not one probe's.
func (p *Probes) loadFold(spec *ebpf.CollectionSpec, cache *btf.Cache) error {
	s := spec.Copy()
	s.Programs = map[string]*ebpf.ProgramSpec{foldIterProg: spec.Programs[foldIterProg]}
	for _, h := range foldHooks {
		s.Programs[h.prog] = spec.Programs[h.prog]
	}
	for name := range s.Maps {
		if strings.HasPrefix(name, "test_") {
			delete(s.Maps, name)
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(s, ebpf.CollectionOptions{MapReplacements: p.maps, Cache: cache})
	if err != nil {
		return fmt.Errorf("load probe folds: %w", err)
	}
	p.colls = append(p.colls, coll)
	for _, h := range foldHooks {
		l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs[h.prog]})
		if err != nil {
			return fmt.Errorf("attach tp_btf/%s: %w", h.tracepoint, err)
		}
		p.links = append(p.links, l)
		p.progs[h.prog] = coll.Programs[h.prog]
	}
	it, err := link.AttachIter(link.IterOptions{Program: coll.Programs[foldIterProg]})
	if err != nil {
		return fmt.Errorf("attach iter/task %s: %w", foldIterProg, err)
	}
	p.links = append(p.links, it)
	p.progs[foldIterProg] = coll.Programs[foldIterProg]
	p.foldIter = it
	return nil
}

// fold brings the maps up to date with every live task's counters: the
// accounting's task iterator did that if it has walked since the last
// read (the stats loop reads the accounting first, every step), otherwise
// the fold iterator walks the tasks; it writes nothing to read.
func (p *Probes) fold() error {
	if p.acc != nil {
		if w := p.acc.walks.Load(); w != p.accWalks {
			p.accWalks = w
			return nil
		}
	}
	if p.foldIter == nil {
		return nil
	}
	rd, err := p.foldIter.Open()
	if err != nil {
		return fmt.Errorf("run probe fold: %w", err)
	}
	defer rd.Close()
	if _, err := io.Copy(io.Discard, rd); err != nil {
		return fmt.Errorf("run probe fold: %w", err)
	}
	return nil
}
