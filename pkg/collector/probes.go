package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/snapshot"
)

// NameProbes is the collector of the kernel probes' counters.
const NameProbes = "probes"

func init() {
	register(Registration{Name: NameProbes, Flag: true, DefaultOn: true,
		Help: "Enable the kernel probes (BPF mode): page cache, softirqs, block IO and network per cgroup, and perf counters where the CPU has them.",
		new:  func(Options) subCollector { return newProbesCollector() }})
}

// probesCollector exports what the optional kernel probes count per cgroup
// (page cache, block IO, network payload, softirqs that interrupted its
// tasks, perf counters), the node's softirqs by vector, and which probes
// run. A family appears only when its probe runs, so a kernel without a hook
// shows no false zeros.
type probesCollector struct {
	active                           *prometheus.Desc
	pcRead, pcAdded, pcDirtied       *prometheus.Desc
	blockBytes, blockReqs            *prometheus.Desc
	netBytes, netCalls               *prometheus.Desc
	softirqCount, softirqSeconds     *prometheus.Desc
	perf                             *prometheus.Desc
	nodeSoftirqs, nodeSoftirqSeconds *prometheus.Desc
}

func newProbesCollector() *probesCollector {
	cg := func(name, help string, extra ...string) *prometheus.Desc {
		return newDesc("cgroup", name, help, append([]string{"cgroup"}, extra...)...)
	}
	return &probesCollector{
		active:     newDesc("probe", "active", "1 for each kernel probe that loaded and runs.", "probe"),
		pcRead:     cg("page_cache_read_pages_total", "Pages read through the page cache by the cgroup's tasks (read, splice, sendfile; not mmap)."),
		pcAdded:    cg("page_cache_added_pages_total", "Pages added to the page cache in the context of the cgroup's tasks: read misses, readahead, and pages created by writes."),
		pcDirtied:  cg("page_cache_dirtied_pages_total", "Pages dirtied by the cgroup's tasks' writes."),
		blockBytes: cg("block_io_bytes_total", "Block IO bytes submitted by the cgroup's tasks (bios before merging; writeback of buffered writes is submitted by kernel flushers and not counted here).", "op"),
		blockReqs:  cg("block_io_bios_total", "Block IO requests (bios) submitted by the cgroup's tasks.", "op"),
		netBytes:   cg("network_payload_bytes_total", "TCP and UDP payload bytes moved by the cgroup's tasks' socket calls.", "protocol", "direction"),
		netCalls:   cg("network_calls_total", "Socket calls of the cgroup's tasks that moved TCP or UDP payload.", "protocol", "direction"),
		softirqCount: cg("softirq_interrupted_total",
			"Softirqs that ran while one of the cgroup's tasks was the one interrupted (not necessarily work done for it)."),
		softirqSeconds:     cg("softirq_interrupted_seconds_total", "Time of those softirqs."),
		perf:               cg("perf_events_total", "Perf counter events credited to the cgroup's tasks at context switches, scaled for multiplexing.", "counter"),
		nodeSoftirqs:       newDesc("node", "softirqs_total", "Softirqs run on the node by vector.", "vector"),
		nodeSoftirqSeconds: newDesc("node", "softirq_seconds_total", "Time spent in softirqs on the node by vector.", "vector"),
	}
}

func (c *probesCollector) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.active, c.pcRead, c.pcAdded, c.pcDirtied, c.blockBytes, c.blockReqs,
		c.netBytes, c.netCalls, c.softirqCount, c.softirqSeconds, c.perf, c.nodeSoftirqs, c.nodeSoftirqSeconds} {
		ch <- d
	}
}

func (c *probesCollector) update(ch chan<- prometheus.Metric, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	on := map[string]bool{}
	for _, p := range snap.Probes {
		on[p] = true
		ch <- metric(c.active, prometheus.GaugeValue, 1, p)
	}
	for _, v := range snap.Softirqs {
		ch <- metric(c.nodeSoftirqs, prometheus.CounterValue, float64(v.Count), v.Name)
		ch <- metric(c.nodeSoftirqSeconds, prometheus.CounterValue, float64(v.Ns)/1e9, v.Name)
	}
	for _, a := range aggregateProbes(snap.Cgroups) {
		cg, p := a.cgroup, &a.stats
		counter := func(d *prometheus.Desc, v uint64, extra ...string) {
			ch <- metric(d, prometheus.CounterValue, float64(v), append([]string{cg}, extra...)...)
		}
		if on[snapshot.ProbePageCacheRead] {
			counter(c.pcRead, p.PageCacheAccessed)
		}
		if on[snapshot.ProbePageCacheAdd] {
			counter(c.pcAdded, p.PageCacheAdded)
		}
		if on[snapshot.ProbePageCacheDirty] {
			counter(c.pcDirtied, p.PageCacheDirtied)
		}
		if on[snapshot.ProbeBlock] {
			counter(c.blockBytes, p.BlockReadBytes, "read")
			counter(c.blockBytes, p.BlockWriteBytes, "write")
			counter(c.blockReqs, p.BlockReads, "read")
			counter(c.blockReqs, p.BlockWrites, "write")
		}
		if on[snapshot.ProbeNet] {
			counter(c.netBytes, p.TCPSentBytes, "tcp", "sent")
			counter(c.netBytes, p.TCPRecvBytes, "tcp", "received")
			counter(c.netBytes, p.UDPSentBytes, "udp", "sent")
			counter(c.netBytes, p.UDPRecvBytes, "udp", "received")
			counter(c.netCalls, p.TCPSends, "tcp", "sent")
			counter(c.netCalls, p.TCPRecvs, "tcp", "received")
			counter(c.netCalls, p.UDPSends, "udp", "sent")
			counter(c.netCalls, p.UDPRecvs, "udp", "received")
		}
		if on[snapshot.ProbeSoftirq] {
			counter(c.softirqCount, p.SoftirqCount)
			ch <- metric(c.softirqSeconds, prometheus.CounterValue, float64(p.SoftirqNs)/1e9, cg)
		}
		for i, name := range snap.Counters {
			if i < len(p.Counters) {
				counter(c.perf, p.Counters[i], name)
			}
		}
	}
	return nil
}

type probeAgg struct {
	cgroup string
	stats  snapshot.ProbeStats
}

// aggregateProbes sums probe counters of workloads sharing a cgroup path
// (a re-created cgroup retained beside its successor), as the cgroup
// collector does for energy.
func aggregateProbes(ws []snapshot.Consumer) []*probeAgg {
	idx := map[string]*probeAgg{}
	var out []*probeAgg
	for i := range ws {
		if ws[i].Probes == nil {
			continue
		}
		a := idx[ws[i].Cgroup]
		if a == nil {
			a = &probeAgg{cgroup: ws[i].Cgroup}
			idx[a.cgroup] = a
			out = append(out, a)
		}
		a.stats.Add(*ws[i].Probes)
	}
	return out
}
