package reading

// The per-process and per-cgroup counters the probes and the profiler hand
// the stats loop. They live here, not in their sources, so the loop and its
// tests' fakes speak them without importing the BPF loader or perf.

// ProcKey names a process across PID reuse: the PID alone is recycled, the
// PID together with the group leader's start time is not. StartTime is in
// whatever unit the source reads (ns for BPF, clock ticks for procfs); it is
// only compared within one source.
type ProcKey struct {
	PID       uint32
	StartTime uint64
}

// ProbeProcess is one process's counters, keyed as the CPU accounting keys
// it (tgid + group leader start time in ns).
type ProbeProcess struct {
	Key ProcKey
	ProbeStats
}

// ProbeCgroup is one cgroup's counters (tasks directly in it), keyed by
// the cgroup id of the same hierarchy as the CPU accounting.
type ProbeCgroup struct {
	ID uint64
	ProbeStats
}

// ProbeReading is one read of the probe maps. Counters are cumulative
// since load; Softirqs is empty when the softirq probe is off.
type ProbeReading struct {
	Processes []ProbeProcess
	Cgroups   []ProbeCgroup
	Softirqs  []SoftirqVector
}

// ProcessCounts is one profiled process's event counts, cumulative since
// its counters were opened and scaled for multiplexing.
type ProcessCounts struct {
	Key    ProcKey
	Comm   string
	Cgroup uint64
	// Counts by event name; clock events are in ns.
	Counts map[string]float64
	// Alive is false for the final counts of a process that exited, which
	// Scan returns exactly once.
	Alive bool
}
