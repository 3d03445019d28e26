package stats

import (
	"time"

	"github.com/wattrace/wattrace/pkg/bpfloader"
	"github.com/wattrace/wattrace/pkg/profiling"
)

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
	// Units are the workloads that own cgroups (containers, pods, VMs,
	// Slurm jobs, systemd units), when workload resolution is on.
	Units []Unit

	// Intervals counts completed intervals since start.
	Intervals uint64

	// Probes lists the kernel probes that run, Counters the perf counters
	// they read; both empty without probes.
	Probes   []string
	Counters []string
	// Softirqs are the node's softirqs by vector, cumulative.
	Softirqs []bpfloader.SoftirqVector
	// PerfEvents are the events counted for opted-in processes.
	PerfEvents []profiling.Event
}

// ZoneOther is the node-level zone platform − (package + dram + gpu), and
// SourceDerived its source: it is computed from the other zones.
const (
	ZoneOther     = "other"
	SourceDerived = "derived"
)

// ZoneID names one energy zone of the node.
type ZoneID struct {
	Name   string // package, core, uncore, dram, psys, gpu, platform, other
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
	Energy Energy
	// Probes are the kernel probes' cumulative counters (page cache,
	// softirqs, block IO, network, perf counters) of a cgroup; nil without
	// probes, and for processes, whose series don't carry them.
	Probes *bpfloader.ProbeStats
	// Perf are the perf event counts of the cgroup's opted-in processes
	// (ended ones included), by event name; nil when none opted in.
	Perf map[string]float64
	// Alive is false once the workload is gone; it stays in snapshots
	// for the configured retention.
	Alive    bool
	LastSeen time.Time
}

// ZoneEnergy is a workload's energy in the zone named Zone.
type ZoneEnergy struct {
	Zone string
	WorkloadEnergy
}

// Energy is a workload's energy by zone, sorted by zone name. A slice
// rather than a map: nodes have a handful of zones, and tens of thousands
// of workloads each carrying a map would dominate the exporter's memory.
type Energy []ZoneEnergy

// Get returns the energy of one zone (zero if the workload has none there).
func (e Energy) Get(zone string) WorkloadEnergy {
	for i := range e {
		if e[i].Zone == zone {
			return e[i].WorkloadEnergy
		}
	}
	return WorkloadEnergy{}
}

// Add adds to a zone's energy, keeping the slice sorted; like append it
// returns the (possibly moved) slice.
func (e Energy) Add(zone string, dynamicJ, idleJ float64) Energy {
	i := 0
	for ; i < len(e) && e[i].Zone < zone; i++ {
	}
	if i == len(e) || e[i].Zone != zone {
		e = append(e, ZoneEnergy{})
		copy(e[i+1:], e[i:])
		e[i] = ZoneEnergy{Zone: zone}
	}
	e[i].DynamicJ += dynamicJ
	e[i].IdleJ += idleJ
	return e
}
