package bpfloader

import (
	"fmt"

	"github.com/wattrace/wattrace/pkg/reading"
)

// countersFrom copies a map entry's counters: the entry is an array in
// enum stat_field's order, the order of ProbeStats.Fields.
func countersFrom(s *probesStats) reading.ProbeStats {
	var c reading.ProbeStats
	for i, f := range c.Fields() {
		*f = s.V[i]
	}
	return c
}

// SoftirqNames are the vectors in the kernel's order (softirq_to_name).
var SoftirqNames = [...]string{"HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"}

// Read returns every process's and cgroup's cumulative counters and the
// node's softirqs by vector.
func (p *Probes) Read() (reading.ProbeReading, error) {
	return p.read(true)
}

// ReadCgroups is Read without the per-process counters: on a node with
// thousands of processes, walking their map each interval costs
// milliseconds of CPU and megabytes of garbage that a caller exporting
// cgroups only doesn't need.
func (p *Probes) ReadCgroups() (reading.ProbeReading, error) {
	return p.read(false)
}

func (p *Probes) read(procs bool) (reading.ProbeReading, error) {
	var r reading.ProbeReading
	if err := p.fold(); err != nil {
		return r, err
	}
	if procs {
		err := p.procReader.each(p.maps["proc_stats"], func(pk *probesProcKey, s *probesStats) {
			r.Processes = append(r.Processes, reading.ProbeProcess{Key: reading.ProcKey{PID: pk.Tgid, StartTime: pk.Start}, ProbeStats: countersFrom(s)})
		})
		if err != nil {
			return r, fmt.Errorf("read proc_stats: %w", err)
		}
	}
	err := p.cgReader.each(p.maps["cgroup_stats"], func(id *uint64, s *probesStats) {
		r.Cgroups = append(r.Cgroups, reading.ProbeCgroup{ID: *id, ProbeStats: countersFrom(s)})
	})
	if err != nil {
		return r, fmt.Errorf("read cgroup_stats: %w", err)
	}
	if p.isActive(reading.ProbeSoftirq) {
		var per []probesVecStat
		for vec, name := range SoftirqNames {
			if err := p.maps["softirq_node"].Lookup(uint32(vec), &per); err != nil {
				return r, fmt.Errorf("read softirq_node[%s]: %w", name, err)
			}
			v := reading.SoftirqVector{Name: name}
			for _, c := range per {
				v.Count += c.Count
				v.Ns += c.Ns
			}
			r.Softirqs = append(r.Softirqs, v)
		}
	}
	return r, nil
}

// Forget deletes the entries of processes and cgroups that are gone. The
// caller passes the processes the CPU accounting reported for the last
// time (Alive false) and the cgroups it stopped reporting: per-process
// entries are keyed alike, so the two sources retire processes together.
func (p *Probes) Forget(procs []reading.ProcKey, cgroups []uint64) error {
	keys := make([]probesProcKey, 0, len(procs))
	for _, k := range procs {
		keys = append(keys, probesProcKey{Tgid: k.PID, Start: k.StartTime})
	}
	if err := deleteAll(p.maps["proc_stats"], keys); err != nil {
		return fmt.Errorf("delete proc_stats entries of ended processes: %w", err)
	}
	if err := deleteAll(p.maps["cgroup_stats"], cgroups); err != nil {
		return fmt.Errorf("delete cgroup_stats entries: %w", err)
	}
	return nil
}

// MapDrops reports the events whose entry could not be stored because
// proc_stats or cgroup_stats was full (slots 0 and 1 of probe_drops).
func (p *Probes) MapDrops() ([]reading.MapDrops, error) {
	return readDrops(p.maps["probe_drops"], "proc_stats", "cgroup_stats")
}
