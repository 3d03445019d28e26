package reading

// Perf event kinds, the three --collector.perf.*-events flags.
const (
	PerfKindHardware = "hardware"
	PerfKindSoftware = "software"
	PerfKindCache    = "cache"
)

// PerfEvent is one perf event that opted-in processes are counted with.
type PerfEvent struct {
	// Name is the key in the counts: lower case, unique across kinds.
	Name string
	Kind string
	// Unit is "ns" for the clock events (cpu_clock, task_clock) and ""
	// for plain counts.
	Unit   string
	Type   uint32
	Config uint64
}
