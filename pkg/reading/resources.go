package reading

import "math"

// Unlimited is the MemoryLimit of a cgroup without a memory limit: v2's
// "max", or v1's page-counter maximum (9223372036854771712 with 4 KiB pages).
const Unlimited = math.MaxUint64

// ResourceField is a set of Resources fields, used to say which ones were read. A field
// whose bit is clear is unavailable: its controller is not mounted, the
// cgroup does not exist under it, the kernel lacks the file (swap accounting
// off, no PSI), or reading it failed. Unavailable fields hold zero, which
// must not be exported as a measured zero.
type ResourceField uint64

// The fields of Resources. CPU covers both CPUUserSeconds and CPUSystemSeconds,
// which always come from the same file.
const (
	FieldCPU ResourceField = 1 << iota
	FieldMemoryCurrent
	FieldMemoryLimit
	FieldMemoryRSS
	FieldMemoryCache
	FieldMemorySwap
	FieldMemoryFailCount
	FieldMemoryOOMKills
	FieldIO
	FieldPSICPUSome
	FieldPSICPUFull
	FieldPSIMemorySome
	FieldPSIMemoryFull
	FieldPSIIOSome
	FieldPSIIOFull
	FieldTasks
	// FieldTasksRecursive is set with FieldTasks when Tasks came from
	// pids.current and so counts the threads of descendant cgroups too.
	FieldTasksRecursive
)

// Has reports whether every field of want is in f.
func (f ResourceField) Has(want ResourceField) bool { return f&want == want }

// PSIResource names a PSI resource; it indexes Resources.PSI.
type PSIResource int

// The PSI resources, in the order of Resources.PSI.
const (
	PSICPU PSIResource = iota
	PSIMemory
	PSIIO
	// NumPSIResources is the number of resources: range over Resources.PSI and
	// convert the index with PSIResource(i).
	NumPSIResources
)

// String returns the resource's name as in its pressure file ("cpu" for
// cpu.pressure), usable as a metric label.
func (r PSIResource) String() string {
	switch r {
	case PSICPU:
		return "cpu"
	case PSIMemory:
		return "memory"
	case PSIIO:
		return "io"
	}
	return "unknown"
}

// SomeField and FullField return the ResourceField bits of r's PSI lines.
func (r PSIResource) SomeField() ResourceField { return FieldPSICPUSome << (2 * ResourceField(r)) }

// FullField: see SomeField.
func (r PSIResource) FullField() ResourceField { return FieldPSICPUFull << (2 * ResourceField(r)) }

// Pressure is the cumulative stall time of one PSI resource: the "total="
// of its "some" line (some task stalled) and "full" line (all non-idle tasks
// stalled at once), converted from µs to seconds. The avg10/60/300 averages
// are left out because a scraper's rate() over the totals gives the same
// at any window.
type Pressure struct {
	SomeSeconds, FullSeconds float64
}

// DeviceIO is the block IO a cgroup did on one device, cumulative since the
// cgroup was created.
type DeviceIO struct {
	// Device is the kernel name (DEVNAME in sysfs, "sda", "nvme0n1"), or
	// "major:minor" when sysfs does not know it.
	Device       string
	Major, Minor uint32
	ReadBytes    uint64
	WriteBytes   uint64
	ReadOps      uint64
	WriteOps     uint64
	// DiscardBytes and DiscardOps are zero on kernels that do not report
	// discards (v1 before 4.19 and v2 before 5.0).
	DiscardBytes uint64
	DiscardOps   uint64
}

// Resources is one reading of a cgroup's resource counters (internal/cgroupstats
// reads them). Counters are cumulative since the cgroup
// was created and hierarchical (they include descendant cgroups) unless noted.
// Available says which fields were read; see ResourceField.
type Resources struct {
	// CPUUserSeconds and CPUSystemSeconds: v1 cpuacct.usage_user/usage_sys
	// (ns), else cpuacct.stat (USER_HZ ticks, 1/100 s); v2 cpu.stat
	// user_usec/system_usec.
	CPUUserSeconds, CPUSystemSeconds float64

	// MemoryCurrent is the memory charged to the cgroup, page cache
	// included: v1 memory.usage_in_bytes, v2 memory.current.
	MemoryCurrent uint64
	// MemoryLimit is v1 memory.limit_in_bytes or v2 memory.max, Unlimited
	// when there is none.
	MemoryLimit uint64
	// MemoryRSS and MemoryCache: v1 memory.stat total_rss/total_cache
	// (rss/cache when the total_ lines are missing); v2 memory.stat
	// anon/file.
	MemoryRSS, MemoryCache uint64
	// MemorySwap: v1 memory.stat total_swap (swap), present only with swap
	// accounting; v2 memory.swap.current, present only with swap enabled.
	MemorySwap uint64
	// MemoryFailCount counts the times the cgroup's usage hit its limit and
	// the kernel had to reclaim (or fail) to charge more: v1
	// memory.failcnt; v2 memory.events "max", the same event ("oom" there
	// counts only charges that failed even after reclaim, a subset).
	MemoryFailCount uint64
	// MemoryOOMKills counts processes the OOM killer killed in the cgroup:
	// v1 memory.oom_control oom_kill (kernel 4.13+); v2
	// memory.events oom_kill.
	MemoryOOMKills uint64

	// IO holds one entry per device, sorted by major and minor number. v1
	// reads blkio.throttle.io_service_bytes_recursive and
	// io_serviced_recursive, falling back to the non-recursive files on
	// kernels without them; v2 reads io.stat. It counts IO as submitted to
	// the block layer, so page-cache hits and not yet written-back writes
	// do not appear.
	IO []DeviceIO

	// PSI is indexed by PSIResource: v2 cpu/memory/io.pressure, or the same
	// files in the v1 cpuacct hierarchy on kernels that carry cgroup v1
	// PSI (not upstream; e.g. Alibaba Cloud Linux with psi_v1=1).
	// Upstream kernels track PSI per cgroup only in the unified hierarchy,
	// so on a hybrid host a cgroup that exists only under the v1 mounts
	// (a Slurm job) has no PSI.
	PSI [NumPSIResources]Pressure

	// Tasks is pids.current (threads, descendants included) when the pids
	// controller has the cgroup (FieldTasksRecursive is then set), else the
	// number of threads in the cgroup itself: v1 "tasks", v2
	// "cgroup.threads".
	Tasks uint64

	Available ResourceField
}
