package collector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/pkg/reading"
)

// resourceDescs are one level's cgroup resource families. Each is exported
// only for the units whose reading has the field: an unavailable counter
// (no swap accounting, no PSI on v1) is absent, never a false zero.
type resourceDescs struct {
	cpuUser, cpuSystem                            *desc
	memUsage, memLimit, memRSS, memCache, memSwap *desc
	memFails, memOOMKills                         *desc
	ioBytes, ioOps, pressure, tasks               *desc
}

func newResourceDescs(sub string, labels []string) resourceDescs {
	d := func(name, help string, extra ...string) *desc {
		return newDesc(sub, name, help, append(append([]string(nil), labels...), extra...)...)
	}
	return resourceDescs{
		cpuUser:     d("cpu_user_seconds_total", "User CPU time of the "+sub+"'s cgroup (kernel accounting, descendants included)."),
		cpuSystem:   d("cpu_system_seconds_total", "System CPU time of the "+sub+"'s cgroup (kernel accounting, descendants included)."),
		memUsage:    d("memory_usage_bytes", "Memory charged to the "+sub+"'s cgroup, page cache included."),
		memLimit:    d("memory_limit_bytes", "Memory limit of the "+sub+"'s cgroup; absent when unlimited."),
		memRSS:      d("memory_rss_bytes", "Anonymous memory of the "+sub+"'s cgroup (v1 total_rss, v2 anon)."),
		memCache:    d("memory_cache_bytes", "Page cache of the "+sub+"'s cgroup (v1 total_cache, v2 file)."),
		memSwap:     d("memory_swap_bytes", "Swap used by the "+sub+"'s cgroup (only with swap accounting)."),
		memFails:    d("memory_fail_count_total", "Times the "+sub+"'s memory usage hit its limit (v1 memory.failcnt, v2 memory.events max)."),
		memOOMKills: d("memory_oom_kills_total", "Processes of the "+sub+" killed by the OOM killer."),
		ioBytes:     d("io_bytes_total", "Block IO bytes of the "+sub+"'s cgroup per device and operation.", "device", "op"),
		ioOps:       d("io_requests_total", "Block IO requests of the "+sub+"'s cgroup per device and operation.", "device", "op"),
		pressure:    d("pressure_seconds_total", "Pressure stall time (PSI) of the "+sub+"'s cgroup: some = some task stalled, full = all stalled.", "resource", "kind"),
		tasks:       d("tasks", "Tasks (threads) in the "+sub+"'s cgroup."),
	}
}

func (r resourceDescs) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*desc{r.cpuUser, r.cpuSystem, r.memUsage, r.memLimit, r.memRSS, r.memCache, r.memSwap,
		r.memFails, r.memOOMKills, r.ioBytes, r.ioOps, r.pressure, r.tasks} {
		ch <- d.prom
	}
}

// nonZero returns the fields of s that were read and are not zero (for IO,
// some device's counter; for PSI, that resource and kind).
func nonZero(s *reading.Resources) reading.ResourceField {
	var f reading.ResourceField
	set := func(field reading.ResourceField, nz bool) {
		if nz && s.Available.Has(field) {
			f |= field
		}
	}
	set(reading.FieldCPU, s.CPUUserSeconds != 0 || s.CPUSystemSeconds != 0)
	set(reading.FieldMemoryCurrent, s.MemoryCurrent != 0)
	set(reading.FieldMemoryLimit, s.MemoryLimit != 0)
	set(reading.FieldMemoryRSS, s.MemoryRSS != 0)
	set(reading.FieldMemoryCache, s.MemoryCache != 0)
	set(reading.FieldMemorySwap, s.MemorySwap != 0)
	set(reading.FieldMemoryFailCount, s.MemoryFailCount != 0)
	set(reading.FieldMemoryOOMKills, s.MemoryOOMKills != 0)
	io := false
	for _, d := range s.IO {
		io = io || d.ReadBytes != 0 || d.WriteBytes != 0 || d.ReadOps != 0 || d.WriteOps != 0
	}
	set(reading.FieldIO, io)
	for i, p := range s.PSI {
		res := reading.PSIResource(i)
		set(res.SomeField(), p.SomeSeconds != 0)
		set(res.FullField(), p.FullSeconds != 0)
	}
	set(reading.FieldTasks, s.Tasks != 0)
	return f
}

// emit exports the resource families of one workload: the fields read and
// in show, the fields not zero for some workload of the level, so that no
// family is all zeros (no swap, no OOM kill, no pressure on a calm node).
func (r resourceDescs) emit(out *sink, s *reading.Resources, show reading.ResourceField, labels []string) {
	gauge := func(d *desc, f reading.ResourceField, v float64) {
		if s.Available.Has(f) && show.Has(f) {
			out.addWith(d, prometheus.GaugeValue, v, labels)
		}
	}
	counter := func(d *desc, f reading.ResourceField, v float64) {
		if s.Available.Has(f) && show.Has(f) {
			out.addWith(d, prometheus.CounterValue, v, labels)
		}
	}
	counter(r.cpuUser, reading.FieldCPU, s.CPUUserSeconds)
	counter(r.cpuSystem, reading.FieldCPU, s.CPUSystemSeconds)
	gauge(r.memUsage, reading.FieldMemoryCurrent, float64(s.MemoryCurrent))
	// A workload without a memory limit has no limit series, as an
	// all-zero family has none: +Inf said nothing a query could use, and
	// cost a series per workload (most jobs and pods on a node).
	if s.MemoryLimit != reading.Unlimited {
		gauge(r.memLimit, reading.FieldMemoryLimit, float64(s.MemoryLimit))
	}
	gauge(r.memRSS, reading.FieldMemoryRSS, float64(s.MemoryRSS))
	gauge(r.memCache, reading.FieldMemoryCache, float64(s.MemoryCache))
	gauge(r.memSwap, reading.FieldMemorySwap, float64(s.MemorySwap))
	counter(r.memFails, reading.FieldMemoryFailCount, float64(s.MemoryFailCount))
	counter(r.memOOMKills, reading.FieldMemoryOOMKills, float64(s.MemoryOOMKills))
	if s.Available.Has(reading.FieldIO) && show.Has(reading.FieldIO) {
		for _, io := range s.IO {
			out.addWith(r.ioBytes, prometheus.CounterValue, float64(io.ReadBytes), labels, io.Device, "read")
			out.addWith(r.ioBytes, prometheus.CounterValue, float64(io.WriteBytes), labels, io.Device, "write")
			out.addWith(r.ioOps, prometheus.CounterValue, float64(io.ReadOps), labels, io.Device, "read")
			out.addWith(r.ioOps, prometheus.CounterValue, float64(io.WriteOps), labels, io.Device, "write")
		}
	}
	for i, p := range s.PSI {
		res := reading.PSIResource(i)
		if s.Available.Has(res.SomeField()) && show.Has(res.SomeField()) {
			out.addWith(r.pressure, prometheus.CounterValue, p.SomeSeconds, labels, res.String(), "some")
		}
		if s.Available.Has(res.FullField()) && show.Has(res.FullField()) {
			out.addWith(r.pressure, prometheus.CounterValue, p.FullSeconds, labels, res.String(), "full")
		}
	}
	gauge(r.tasks, reading.FieldTasks, float64(s.Tasks))
}
