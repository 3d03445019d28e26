// Package power provides node energy meters: cumulative joules per zone
// that wattrace apportions to workloads.
//
// # Measured: RAPL
//
// RAPL reads the kernel powercap interface (<sysfs>/class/powercap/
// intel-rapl:*, also used for AMD CPUs). These are hardware energy counters
// for the CPU package, its cores and uncore, DRAM and, on some client
// platforms, the whole SoC ("psys"). They are measurements, but of those
// domains only: fans, disks, NICs, GPUs and PSU losses are not included,
// and the counters are themselves partly modelled by the CPU (fully so on
// pre-Haswell Intel; AMD's are model-based too), though on Intel since
// Haswell the package counter tracks external measurement closely. Since
// Linux 5.10 the counters are readable
// only by root (CVE-2020-8694, "PLATYPUS"); the error from Read says how to
// grant access.
//
// # Estimated: Estimator
//
// Where there is no meter (virtual machines, most arm64 hosts, servers
// without a BMC) Estimator models each zone's power as a curve of node CPU
// utilisation, built by pkg/power/curves from what the node knows (CPU
// model string, sockets, threads, memory): a whole-server curve fitted on
// SPECpower_ssj2008 results for a bare-metal node's platform, TDP × Teads'
// ratio curve for its package, and Cloud Carbon Footprint's per-vCPU
// figures for the host's microarchitecture, shaped by the SPECpower curve,
// for a VM. It integrates the curve's value over each interval and reports
// the estimate with a band (EstimateReporter).
//
// How far off the estimate can be, stated plainly (docs/meters.md and
// docs/performance.md have the figures):
//
//   - On SPECpower results it was not fitted on, the whole-server curve's
//     median error is about 8% and its 90th percentile about 25%; idle is
//     the least predictable level. SPECpower servers are vendor-tuned
//     benchmark machines; real ones with more disks, NICs or GPUs draw more.
//   - The package and VM curves come from other populations (AWS hosts,
//     CCF's averages) and have no measurement here to check them; their
//     bands are the server band, a proxy.
//   - Utilisation inside a VM is the guest's view: it does not see the
//     host's other tenants or hyperthread siblings, and a vCPU is assumed
//     to cost a fixed share of a host. Steal time is read (Estimator.SetSteal):
//     the load is the guest's busy time over the time it had, the dynamic
//     part counts only that time, and the band's top widens with steal
//     (docs/vm.md).
//   - Clouds sometimes mask the CPU model; the generic curves are used and
//     the fallback is logged and exported (wattrace_node_estimator_info).
//
// Treat estimator output as a ballpark figure, good for ranking workloads
// on the same node and for order-of-magnitude totals, not for billing or
// comparing nodes. It is always exported as estimated (Meter.Estimated,
// and the "estimator" source label) so it is never mistaken for a
// measurement.
package power
