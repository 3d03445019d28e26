// Package usage holds the cumulative CPU counters that every accounting
// source (the BPF programs, or procfs in fallback mode) hands to the stats
// loop. It exists so that sources and the loop share one vocabulary without
// importing each other.
package usage

import (
	"github.com/wattrace/wattrace/pkg/reading"
)

// ProcKey names a process across PID reuse (see reading.ProcKey, whose
// probe and profiler counters carry it too).
type ProcKey = reading.ProcKey

// Process is one process's cumulative counters. CPUNs counts every thread
// the process ever had, exited threads included.
type Process struct {
	Key      ProcKey
	Comm     string
	Cgroup   uint64 // id of the process's cgroup in the key hierarchy
	CPUNs    uint64
	Switches uint64 // voluntary + involuntary context switches
	// CPU is the CPU the process last ran on, -1 when unknown; the loop uses
	// it to place the interval's usage on a socket.
	CPU int
	// Alive is false on the one read that reports a process's final totals;
	// the source forgets the process after that read.
	Alive bool
}

// Cgroup is one cgroup's cumulative counters for tasks directly in it
// (not its descendants), exited tasks included.
type Cgroup struct {
	ID       uint64
	CPUNs    uint64
	Switches uint64
}

// Reading is one consistent read of a source. Counters never decrease
// between two readings of the same source.
type Reading struct {
	Processes []Process
	Cgroups   []Cgroup
}

// Source is implemented by each accounting backend.
type Source interface {
	Read() (Reading, error)
	// Mode is "bpf" or "procfs".
	Mode() string
	Close() error
}
