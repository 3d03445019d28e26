package snapshot

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

// fields lists the counters of s, so arithmetic on ProbeStats can't miss
// one when a field is added.
func (s *ProbeStats) fields() []*uint64 {
	f := []*uint64{&s.PageCacheAccessed, &s.PageCacheAdded, &s.PageCacheDirtied,
		&s.SoftirqCount, &s.SoftirqNs,
		&s.BlockReadBytes, &s.BlockReads, &s.BlockWriteBytes, &s.BlockWrites,
		&s.TCPSentBytes, &s.TCPSends, &s.TCPRecvBytes, &s.TCPRecvs,
		&s.UDPSentBytes, &s.UDPSends, &s.UDPRecvBytes, &s.UDPRecvs}
	for i := range s.Counters {
		f = append(f, &s.Counters[i])
	}
	return f
}

// Delta returns s − prev per counter. A counter below prev was reset (its
// entry deleted and created again), so its whole value is new.
func (s ProbeStats) Delta(prev ProbeStats) ProbeStats {
	cur, old := s.fields(), prev.fields()
	var d ProbeStats
	out := d.fields()
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
	dst, src := s.fields(), d.fields()
	for i := range dst {
		*dst[i] += *src[i]
	}
}
