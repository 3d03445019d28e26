package layers

// API lists what pkg/ holds: the packages another program may import,
// each for a reason it would. Everything else (the loop's stages, the
// collectors, the composition, the units server's parts, the test
// fakes) lives under internal/, where Go itself keeps other modules
// out. A path ending in "/..." covers the packages under it.
var API = map[string]string{
	"pkg/reading":      "the vocabulary a source hands the loop: readings and their checks",
	"pkg/model":        "the ratio power model: one zone's energy split into idle and dynamic, dynamic by usage share",
	"pkg/power/...":    "the node's meters (RAPL, perf, hwmon, pm_counters, IPMI, Redfish, CapMC, the host share), their discovery and the estimator's curves",
	"pkg/gpu/...":      "the GPU sources: NVML, DRM sysfs, fdinfo and the scheduler's allocations",
	"pkg/carbon":       "carbon-intensity providers",
	"pkg/cgroup":       "cgroup hierarchies and paths, read by deploy/checks too",
	"pkg/workload/...": "cgroup paths and allocations resolved to workloads (kinds, Kubernetes, libvirt)",
	"pkg/units":        "the units store's vocabulary, what API clients decode",
}
