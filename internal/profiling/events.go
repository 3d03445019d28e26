package profiling

import (
	"fmt"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/reading"
)

var hardwareEvents = []reading.PerfEvent{
	{Name: "cpu_cycles", Config: unix.PERF_COUNT_HW_CPU_CYCLES},
	{Name: "instructions", Config: unix.PERF_COUNT_HW_INSTRUCTIONS},
	{Name: "cache_references", Config: unix.PERF_COUNT_HW_CACHE_REFERENCES},
	{Name: "cache_misses", Config: unix.PERF_COUNT_HW_CACHE_MISSES},
	{Name: "branch_instructions", Config: unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS},
	{Name: "branch_misses", Config: unix.PERF_COUNT_HW_BRANCH_MISSES},
	{Name: "bus_cycles", Config: unix.PERF_COUNT_HW_BUS_CYCLES},
	{Name: "stalled_cycles_frontend", Config: unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND},
	{Name: "stalled_cycles_backend", Config: unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND},
	{Name: "ref_cpu_cycles", Config: unix.PERF_COUNT_HW_REF_CPU_CYCLES},
}

var softwareEvents = []reading.PerfEvent{
	{Name: "cpu_clock", Unit: "ns", Config: unix.PERF_COUNT_SW_CPU_CLOCK},
	{Name: "task_clock", Unit: "ns", Config: unix.PERF_COUNT_SW_TASK_CLOCK},
	{Name: "page_faults", Config: unix.PERF_COUNT_SW_PAGE_FAULTS},
	{Name: "context_switches", Config: unix.PERF_COUNT_SW_CONTEXT_SWITCHES},
	{Name: "cpu_migrations", Config: unix.PERF_COUNT_SW_CPU_MIGRATIONS},
	{Name: "minor_faults", Config: unix.PERF_COUNT_SW_PAGE_FAULTS_MIN},
	{Name: "major_faults", Config: unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ},
	{Name: "alignment_faults", Config: unix.PERF_COUNT_SW_ALIGNMENT_FAULTS},
	{Name: "emulation_faults", Config: unix.PERF_COUNT_SW_EMULATION_FAULTS},
}

// Cache events are named <cache>_<op>_<result>, e.g. l1d_read_miss,
// llc_write_access. The result is "access", not "hit": the kernel's
// PERF_COUNT_HW_CACHE_RESULT_ACCESS counts every access, hits and misses
// alike (node_exporter calls it "hits", which overstates the hit rate).
var (
	cacheIDs = []struct {
		name string
		id   uint64
	}{
		{"l1d", unix.PERF_COUNT_HW_CACHE_L1D},
		{"l1i", unix.PERF_COUNT_HW_CACHE_L1I},
		{"llc", unix.PERF_COUNT_HW_CACHE_LL},
		{"dtlb", unix.PERF_COUNT_HW_CACHE_DTLB},
		{"itlb", unix.PERF_COUNT_HW_CACHE_ITLB},
		{"bpu", unix.PERF_COUNT_HW_CACHE_BPU},
		{"node", unix.PERF_COUNT_HW_CACHE_NODE},
	}
	cacheOps = []struct {
		name string
		op   uint64
	}{
		{"read", unix.PERF_COUNT_HW_CACHE_OP_READ},
		{"write", unix.PERF_COUNT_HW_CACHE_OP_WRITE},
		{"prefetch", unix.PERF_COUNT_HW_CACHE_OP_PREFETCH},
	}
	cacheResults = []struct {
		name   string
		result uint64
	}{
		{"access", unix.PERF_COUNT_HW_CACHE_RESULT_ACCESS},
		{"miss", unix.PERF_COUNT_HW_CACHE_RESULT_MISS},
	}
)

// Events returns every event of a kind, for flag help and validation.
func Events(kind string) []reading.PerfEvent {
	switch kind {
	case reading.PerfKindHardware:
		return withType(hardwareEvents, reading.PerfKindHardware, unix.PERF_TYPE_HARDWARE)
	case reading.PerfKindSoftware:
		return withType(softwareEvents, reading.PerfKindSoftware, unix.PERF_TYPE_SOFTWARE)
	case reading.PerfKindCache:
		var evs []reading.PerfEvent
		for _, c := range cacheIDs {
			for _, o := range cacheOps {
				for _, r := range cacheResults {
					evs = append(evs, reading.PerfEvent{
						Name: c.name + "_" + o.name + "_" + r.name,
						Kind: reading.PerfKindCache,
						Type: unix.PERF_TYPE_HW_CACHE,
						// perf_event_open(2): id | op<<8 | result<<16.
						Config: c.id | o.op<<8 | r.result<<16,
					})
				}
			}
		}
		return evs
	}
	return nil
}

func withType(evs []reading.PerfEvent, kind string, typ uint32) []reading.PerfEvent {
	out := slices.Clone(evs)
	for i := range out {
		out[i].Kind = kind
		out[i].Type = typ
	}
	return out
}

// EventNames returns the names of every event of a kind.
func EventNames(kind string) []string {
	var names []string
	for _, e := range Events(kind) {
		names = append(names, e.Name)
	}
	return names
}

// ParseEvents resolves event names of one kind. Names are matched case
// insensitively (L1D_read_miss is l1d_read_miss); duplicates are dropped.
// An unknown name is an error naming the allowed ones, so a typo in a flag
// stops start-up rather than silently counting nothing.
func ParseEvents(kind string, names []string) ([]reading.PerfEvent, error) {
	all := Events(kind)
	if all == nil {
		return nil, fmt.Errorf("profiling: unknown event kind %q", kind)
	}
	var out []reading.PerfEvent
	seen := make(map[string]bool)
	for _, n := range names {
		n = strings.ToLower(strings.TrimSpace(n))
		if n == "" || seen[n] {
			continue
		}
		i := slices.IndexFunc(all, func(e reading.PerfEvent) bool { return e.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("profiling: unknown %s event %q: allowed %s", kind, n, strings.Join(EventNames(kind), ", "))
		}
		seen[n] = true
		out = append(out, all[i])
	}
	return out, nil
}
