package reading

// Probe names, as the probe loader reports those that run.
const (
	ProbePageCacheRead  = "pagecache_read"  // pages read through the page cache
	ProbePageCacheAdd   = "pagecache_add"   // pages added to the page cache
	ProbePageCacheDirty = "pagecache_dirty" // pages dirtied
	ProbeSoftirq        = "softirq"         // softirq counts and time
	ProbeBlock          = "block"           // block IO submitted
	ProbeNet            = "net"             // TCP and UDP payload
	ProbeCounters       = "counters"        // perf counters at context switches
)

// MaxCounters is how many perf counters the context-switch program reads
// (MAX_COUNTERS in bpf/probes.bpf.c).
const MaxCounters = 4

// ProbeStats are one process's or cgroup's cumulative probe counters.
// A figure whose probe is not active stays zero.
type ProbeStats struct {
	// Pages read through the page cache (read, splice, sendfile; not mmap).
	PageCacheAccessed uint64
	// Pages added to the page cache in this task's context: read misses,
	// readahead, and pages created by writes.
	PageCacheAdded uint64
	// Pages turned dirty by this task's writes.
	PageCacheDirtied uint64
	// Softirqs that ran while this task was the one interrupted, and their time.
	SoftirqCount, SoftirqNs uint64
	// Block IO submitted by this task (bios, before merging).
	BlockReadBytes, BlockReads, BlockWriteBytes, BlockWrites uint64
	// TCP and UDP payload moved by this task's socket calls that moved any.
	TCPSentBytes, TCPSends, TCPRecvBytes, TCPRecvs uint64
	UDPSentBytes, UDPSends, UDPRecvBytes, UDPRecvs uint64
	// Perf counters credited at context switches, in the order of
	// Snapshot.Counters.
	Counters [MaxCounters]uint64
}

// PageCacheHits estimates the page-cache hits of an interval from the
// deltas of PageCacheAccessed and PageCacheAdded over it: pages read that
// did not have to be added. Clamped at zero, since adds also count
// readahead beyond what was read and pages created by writes.
func PageCacheHits(accessedDelta, addedDelta uint64) uint64 {
	if accessedDelta > addedDelta {
		return accessedDelta - addedDelta
	}
	return 0
}

// SoftirqVector is one softirq vector's node-wide count and time.
type SoftirqVector struct {
	Name  string
	Count uint64
	Ns    uint64
}

// Fields lists the counters of s in the order of enum stat_field in
// bpf/fold.h, which is how the probes' maps hold them: a new figure
// is a STAT_* entry there and a field here, in the same place.
func (s *ProbeStats) Fields() [ProbeFields]*uint64 {
	f := [ProbeFields]*uint64{&s.PageCacheAccessed, &s.PageCacheAdded, &s.PageCacheDirtied,
		&s.SoftirqCount, &s.SoftirqNs,
		&s.BlockReadBytes, &s.BlockReads, &s.BlockWriteBytes, &s.BlockWrites,
		&s.TCPSentBytes, &s.TCPSends, &s.TCPRecvBytes, &s.TCPRecvs,
		&s.UDPSentBytes, &s.UDPSends, &s.UDPRecvBytes, &s.UDPRecvs}
	for i := range s.Counters {
		f[probeEventFields+i] = &s.Counters[i]
	}
	return f
}

// ProbeFields is how many counters a ProbeStats holds: the events' fields,
// then the perf counters. Fields returns an array, not a slice: the
// probes' reads and deltas call it for every cgroup at every step, and a
// slice each was megabytes of garbage a minute at 10,000 processes.
const (
	probeEventFields = 17
	ProbeFields      = probeEventFields + MaxCounters
)

// Delta returns s − prev per counter. A counter below prev was reset (its
// entry deleted and created again), so its whole value is new.
func (s ProbeStats) Delta(prev ProbeStats) ProbeStats {
	cur, old := s.Fields(), prev.Fields()
	var d ProbeStats
	out := d.Fields()
	for i := range cur {
		if *cur[i] >= *old[i] {
			*out[i] = *cur[i] - *old[i]
		} else {
			*out[i] = *cur[i]
		}
	}
	return d
}

// Add adds d to s.
func (s *ProbeStats) Add(d ProbeStats) {
	dst, src := s.Fields(), d.Fields()
	for i := range dst {
		*dst[i] += *src[i]
	}
}

// ProbeFamily is a row of the probe table: one family of per-cgroup series
// (wattrace_cgroup_<Name>, labelled cgroup plus Labels), exported while its
// probe runs. The probes collector builds its families from this table, so
// a probe's figures, names and help live in one place.
type ProbeFamily struct {
	Probe  string
	Name   string
	Help   string
	Labels []string
	Series []ProbeSeries
}

// ProbeSeries is one series of a family: its label values and its value.
type ProbeSeries struct {
	Labels []string
	Value  func(*ProbeStats) float64
}

func count(f func(*ProbeStats) uint64, labels ...string) ProbeSeries {
	return ProbeSeries{Labels: labels, Value: func(s *ProbeStats) float64 { return float64(f(s)) }}
}

// ProbeFamilies is the probe table.
var ProbeFamilies = []ProbeFamily{
	{Probe: ProbePageCacheRead, Name: "page_cache_read_pages_total",
		Help:   "Pages read through the page cache by the cgroup's tasks (read, splice, sendfile; not mmap).",
		Series: []ProbeSeries{count(func(s *ProbeStats) uint64 { return s.PageCacheAccessed })}},
	{Probe: ProbePageCacheAdd, Name: "page_cache_added_pages_total",
		Help:   "Pages added to the page cache in the context of the cgroup's tasks: read misses, readahead, and pages created by writes.",
		Series: []ProbeSeries{count(func(s *ProbeStats) uint64 { return s.PageCacheAdded })}},
	{Probe: ProbePageCacheDirty, Name: "page_cache_dirtied_pages_total",
		Help:   "Pages dirtied by the cgroup's tasks' writes.",
		Series: []ProbeSeries{count(func(s *ProbeStats) uint64 { return s.PageCacheDirtied })}},
	{Probe: ProbeBlock, Name: "block_io_bytes_total", Labels: []string{"op"},
		Help: "Block IO bytes submitted by the cgroup's tasks (bios before merging; writeback of buffered writes is submitted by kernel flushers and not counted here).",
		Series: []ProbeSeries{
			count(func(s *ProbeStats) uint64 { return s.BlockReadBytes }, "read"),
			count(func(s *ProbeStats) uint64 { return s.BlockWriteBytes }, "write"),
		}},
	{Probe: ProbeBlock, Name: "block_io_bios_total", Labels: []string{"op"},
		Help: "Block IO requests (bios) submitted by the cgroup's tasks.",
		Series: []ProbeSeries{
			count(func(s *ProbeStats) uint64 { return s.BlockReads }, "read"),
			count(func(s *ProbeStats) uint64 { return s.BlockWrites }, "write"),
		}},
	{Probe: ProbeNet, Name: "network_payload_bytes_total", Labels: []string{"protocol", "direction"},
		Help: "TCP and UDP payload bytes moved by the cgroup's tasks' socket calls.",
		Series: []ProbeSeries{
			count(func(s *ProbeStats) uint64 { return s.TCPSentBytes }, "tcp", "sent"),
			count(func(s *ProbeStats) uint64 { return s.TCPRecvBytes }, "tcp", "received"),
			count(func(s *ProbeStats) uint64 { return s.UDPSentBytes }, "udp", "sent"),
			count(func(s *ProbeStats) uint64 { return s.UDPRecvBytes }, "udp", "received"),
		}},
	{Probe: ProbeNet, Name: "network_calls_total", Labels: []string{"protocol", "direction"},
		Help: "Socket calls of the cgroup's tasks that moved TCP or UDP payload.",
		Series: []ProbeSeries{
			count(func(s *ProbeStats) uint64 { return s.TCPSends }, "tcp", "sent"),
			count(func(s *ProbeStats) uint64 { return s.TCPRecvs }, "tcp", "received"),
			count(func(s *ProbeStats) uint64 { return s.UDPSends }, "udp", "sent"),
			count(func(s *ProbeStats) uint64 { return s.UDPRecvs }, "udp", "received"),
		}},
	{Probe: ProbeSoftirq, Name: "softirq_interrupted_total",
		Help:   "Softirqs that ran while one of the cgroup's tasks was the one interrupted (not necessarily work done for it).",
		Series: []ProbeSeries{count(func(s *ProbeStats) uint64 { return s.SoftirqCount })}},
	{Probe: ProbeSoftirq, Name: "softirq_interrupted_seconds_total",
		Help:   "Time of those softirqs.",
		Series: []ProbeSeries{{Value: func(s *ProbeStats) float64 { return float64(s.SoftirqNs) / 1e9 }}}},
}
