package snapshot

import (
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
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

	Zones []Zone
	// Cgroups and Processes are records shared between snapshots: one
	// whose consumer did not change since the last step is the record the
	// last snapshot published, not a copy. A record is immutable once
	// published, like the snapshot.
	Cgroups   []*Consumer
	Processes []*Consumer
	// Workloads are what users recognise (containers, pods, VMs, Slurm
	// jobs, systemd services): each the sum of the cgroups it owns, when
	// workload resolution is on.
	Workloads []Workload

	// Intervals counts completed intervals since start.
	Intervals uint64

	// Probes lists the kernel probes that run, Counters the perf counters
	// they read; both empty without probes.
	Probes   []string
	Counters []string
	// Softirqs are the node's softirqs by vector, cumulative.
	Softirqs []reading.SoftirqVector
	// PerfEvents are the events counted for opted-in processes.
	PerfEvents []reading.PerfEvent

	// Meters is the health of every source that reports it: those behind
	// the meter (RAPL, a BMC, hwmon) and the other readers (procfs,
	// cgroupfs, the BPF maps' counters).
	Meters []reading.SourceHealth
	// Estimates are the modelled zones' power with their bands; empty
	// when every zone is measured.
	Estimates []reading.Estimate
	// MapDrops counts, per BPF map, the events lost because the map was
	// full; empty unless BPF accounting runs.
	MapDrops []reading.MapDrops

	// Intensities are the carbon-intensity providers' latest factors and
	// Carbon their health; empty without emissions.
	Intensities []reading.Intensity
	Carbon      []reading.SourceHealth
	// GPUs are the node's GPU devices (internal/stats/gpu.go); empty on a node
	// without GPUs.
	GPUs []GPU
	// lazy holds the workloads' resource counters, read on the first
	// scrape that asks (see WorkloadResources).
	lazy *lazyResources
}

// ZoneOther is the node-level zone platform − (package + dram + gpu), and
// SourceDerived its source: it is computed from the other zones.
const (
	ZoneOther     = "other"
	SourceDerived = "derived"
)

// Zone is the node's energy in one zone. All joule fields are cumulative
// since the exporter started and never decrease.
type Zone struct {
	reading.ZoneID
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
	// Grams are the zone's emissions by provider, sorted by provider;
	// nil without emissions.
	Grams []NodeGrams
	// Ended is set while the meter stands behind no figure of the zone
	// (a meter's ZoneEnder ability): its node series are not exported, and it
	// stays here only so that the workloads' series of the zone keep
	// their labels rather than becoming "unknown".
	Ended bool
}

// Workload is what a user recognises, at one level (a container, pod, VM,
// Slurm job or systemd service): the sum of the cgroups it owns. Counters
// are cumulative and kept in the workload itself, so they never go backwards when one of its
// cgroups leaves the snapshot before the others.
type Workload struct {
	Level string
	// Manager is what runs it: docker, containerd, crio, podman,
	// kubernetes, slurm, libvirt, systemd.
	Manager string
	// Labels are the level's label values, aligned with
	// pkg/workload/ident's LabelNames(Level).
	Labels          []string
	CPUSeconds      float64
	ContextSwitches uint64
	Energy          Energy
	// Grams are the workload's emissions, summed over its cgroups as
	// Energy is.
	Grams Emissions
	// Cgroups counts the workload's cgroups alive in the latest interval.
	Cgroups  int
	Alive    bool
	LastSeen time.Time
	// Resources are the workload's cgroup resource counters (memory, IO,
	// pressure, ...), read from its top cgroup; nil when not read. A workload
	// that ended keeps its last reading.
	Resources *reading.Resources
	// Probes are the kernel probes' counters summed over the workload's
	// cgroups; nil without probes.
	Probes *reading.ProbeStats
}

// ZoneJoules is one consumer's or workload's cumulative energy in one zone.
type ZoneJoules struct {
	DynamicJ float64
	IdleJ    float64 // by the idle attribution policy; 0 under "none"
}

// Consumer is one thing the loop accounts for: a cgroup or a process.
// Counters are cumulative.
type Consumer struct {
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
	// Grams are the emissions of that energy by provider and zone; nil
	// without emissions.
	Grams Emissions
	// Probes are the kernel probes' cumulative counters (page cache,
	// softirqs, block IO, network, perf counters) of a cgroup; nil without
	// probes, and for processes, whose series don't carry them.
	Probes *reading.ProbeStats
	// Perf are the perf event counts of the cgroup's opted-in processes
	// (ended ones included), by event name; nil when none opted in.
	Perf map[string]float64
	// Alive is false once the workload is gone; it stays in snapshots
	// for the configured retention.
	Alive bool
	// LastSeen is when it was last seen alive: for one that ended, the
	// last step that saw it; a live one's record is published again while
	// nothing else of it changes, so there it is the step that made the
	// record.
	LastSeen time.Time
	// InWorkload is set on a cgroup that belongs to a workload at an
	// exported level (its figures are in that workload's): the cgroup
	// families leave it out unless asked for (collector.cgroup.workloads),
	// so each cgroup is exported once, at its most meaningful level.
	InWorkload bool
}

// ZoneSeries names one energy series of a consumer or workload: a zone,
// and the source and method of the zone's node series when the energy was
// split from it. A zone that changes source or method (a guest's host
// share, then the estimator standing in) starts a new node series, and
// every consumer's energy split from it from then on goes to a series of
// the new labels: each counts its own joules from zero, the old one stops
// where it was.
type ZoneSeries struct {
	Zone string
	// Source and Estimated are the node series' source and method. An
	// empty Source is not known: the exported series then carries the
	// zone's labels of the moment.
	Source    string
	Estimated bool
}

// less orders series by zone, then source, then method (measured first).
func (s ZoneSeries) less(o ZoneSeries) bool {
	if s.Zone != o.Zone {
		return s.Zone < o.Zone
	}
	if s.Source != o.Source {
		return s.Source < o.Source
	}
	return !s.Estimated && o.Estimated
}

// ZoneEnergy is a consumer's energy in one series of the zone named Zone.
type ZoneEnergy struct {
	Zone      string
	Source    string
	Estimated bool
	ZoneJoules
}

// Series names the series the energy belongs to.
func (e *ZoneEnergy) Series() ZoneSeries {
	return ZoneSeries{Zone: e.Zone, Source: e.Source, Estimated: e.Estimated}
}

// Energy is a consumer's or workload's energy by zone series, sorted by
// ZoneSeries (so a zone's series are adjacent). A slice rather than a map:
// nodes have a handful of zones, and tens of thousands of consumers each
// carrying a map would dominate the exporter's memory. A series exists
// once energy was credited to it.
type Energy []ZoneEnergy

// Get returns the energy of one zone, summed over its series (zero if the
// workload has none there).
func (e Energy) Get(zone string) ZoneJoules {
	var j ZoneJoules
	for i := range e {
		if e[i].Zone == zone {
			j.DynamicJ += e[i].DynamicJ
			j.IdleJ += e[i].IdleJ
		}
	}
	return j
}

// Series returns the energy of one series (zero if the workload has none
// there).
func (e Energy) Series(s ZoneSeries) ZoneJoules {
	for i := range e {
		if e[i].Series() == s {
			return e[i].ZoneJoules
		}
	}
	return ZoneJoules{}
}

// Add adds to a series' energy, keeping the slice sorted; like append it
// returns the (possibly moved) slice.
func (e Energy) Add(s ZoneSeries, dynamicJ, idleJ float64) Energy {
	i := 0
	for ; i < len(e) && e[i].Series().less(s); i++ {
	}
	if i == len(e) || e[i].Series() != s {
		e = append(e, ZoneEnergy{})
		copy(e[i+1:], e[i:])
		e[i] = ZoneEnergy{Zone: s.Zone, Source: s.Source, Estimated: s.Estimated}
	}
	e[i].DynamicJ += dynamicJ
	e[i].IdleJ += idleJ
	return e
}

// ZoneGrams is a consumer's or workload's cumulative grams of CO2e in one
// zone, priced by one provider's factors: each interval's joules times the
// factor in force in that interval.
type ZoneGrams struct {
	Provider, Zone string
	DynamicG       float64
	IdleG          float64
}

// Emissions is a consumer's or workload's grams by provider and zone,
// sorted by provider then zone; nil without emissions.
type Emissions []ZoneGrams

// Get returns one provider's grams in one zone (zero if none).
func (e Emissions) Get(provider, zone string) ZoneGrams {
	for i := range e {
		if e[i].Provider == provider && e[i].Zone == zone {
			return e[i]
		}
	}
	return ZoneGrams{Provider: provider, Zone: zone}
}

// Add adds grams to one provider's zone, keeping the slice sorted; like
// append it returns the (possibly moved) slice.
func (e Emissions) Add(provider, zone string, dynamicG, idleG float64) Emissions {
	less := func(g ZoneGrams) bool {
		return g.Provider < provider || (g.Provider == provider && g.Zone < zone)
	}
	i := 0
	for ; i < len(e) && less(e[i]); i++ {
	}
	if i == len(e) || e[i].Provider != provider || e[i].Zone != zone {
		e = append(e, ZoneGrams{})
		copy(e[i+1:], e[i:])
		e[i] = ZoneGrams{Provider: provider, Zone: zone}
	}
	e[i].DynamicG += dynamicG
	e[i].IdleG += idleG
	return e
}

// NodeGrams is a node zone's cumulative grams under one provider, split
// like its energy: DynamicG + IdleG is the zone's grams, UnattributedG
// the part of DynamicG that no consumer was credited.
type NodeGrams struct {
	Provider      string
	DynamicG      float64
	IdleG         float64
	UnattributedG float64
}
