package stats

import "time"

// Snapshot is what the loop publishes after each interval. It is never
// modified after publication, so collectors read it without locks and every
// scrape sees one consistent interval.
type Snapshot struct {
	// Time is when the interval this snapshot describes ended.
	Time time.Time
	// Interval is the length of that interval.
	Interval time.Duration
	// Mode is the accounting mode: "bpf" or "procfs".
	Mode string
	// Hierarchy names the cgroup hierarchy workloads are keyed by:
	// "v2", "cpuacct" or "cpu".
	Hierarchy string

	Zones     []Zone
	Cgroups   []Workload
	Processes []Workload

	// Intervals counts completed intervals since start.
	Intervals uint64
}

// ZoneID names one energy zone of the node.
type ZoneID struct {
	Name   string // package, core, uncore, dram, psys, platform
	Socket int    // -1 when the zone is node-wide
}

// Zone is the node's energy in one zone. All joule fields are cumulative
// since the exporter started and never decrease.
type Zone struct {
	ZoneID
	Source    string // rapl, estimator, ...
	Estimated bool
	EnergyJ   float64 // = IdleJ + DynamicJ
	IdleJ     float64
	DynamicJ  float64
	// UnattributedJ is the part of DynamicJ of intervals in which no
	// workload used the usage metric (so there was nothing to split by).
	UnattributedJ float64
	// PowerW is the mean power over the last interval.
	PowerW float64
	// IdleClamps counts intervals where the idle model exceeded the
	// measured energy and idle was clamped to it.
	IdleClamps uint64
}

// WorkloadEnergy is one workload's cumulative energy in one zone.
type WorkloadEnergy struct {
	DynamicJ float64
	IdleJ    float64 // by the idle attribution policy; 0 under "none"
}

// Workload is one cgroup or process. Counters are cumulative.
type Workload struct {
	// Cgroup is the cgroup path relative to the key hierarchy's root
	// ("/" for the root), for a process the path of its cgroup.
	Cgroup string
	// CgroupID is the id in the key hierarchy (the directory's inode).
	CgroupID uint64
	// PID and Comm are set for processes only.
	PID  uint32
	Comm string

	CPUSeconds      float64
	ContextSwitches uint64
	// Energy per zone name (summed over sockets).
	Energy map[string]WorkloadEnergy
	// Alive is false once the workload is gone; it stays in snapshots
	// for the configured retention.
	Alive    bool
	LastSeen time.Time
}
