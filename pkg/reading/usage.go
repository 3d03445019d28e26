package reading

// The cumulative CPU counters that every accounting source (the BPF
// programs, or procfs in fallback mode) hands to the stats loop; ProcKey
// (counters.go) keys the processes, as the probes' and the profiler's
// counters key them. The source's interface is declared where it is
// consumed (stats.Accounting, measure.CPUReader).

// ProcessUsage is one process's cumulative counters. CPUNs counts every
// thread the process ever had, exited threads included.
type ProcessUsage struct {
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

// CgroupUsage is one cgroup's cumulative counters for tasks directly in
// it (not its descendants), exited tasks included.
type CgroupUsage struct {
	ID       uint64
	CPUNs    uint64
	Switches uint64
}

// Usage is one consistent read of a source. Counters never decrease
// between two readings of the same source.
type Usage struct {
	Processes []ProcessUsage
	Cgroups   []CgroupUsage
}
