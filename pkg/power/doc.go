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
// Where there is no meter (virtual machines, most arm64 hosts) Estimator
// models node power as
//
//	P = CPUs * (MinWattsPerCPU + (MaxWattsPerCPU - MinWattsPerCPU) * util)
//
// and integrates it over time. The per-vCPU figures are Cloud Carbon
// Footprint's SPECpower_ssj2008-derived coefficients per microarchitecture
// (coefficients.json cites the exact table and commit); unknown CPUs get
// CCF's AWS average (0.74 W idle, 3.5 W at full load, per vCPU).
//
// How far off the estimate can be, stated plainly:
//
//   - SPECpower results are averages over vendor-tuned benchmark servers;
//     a linear model built from them typically errs by tens of percent for
//     any particular machine, and real power is not linear in utilisation
//     (turbo, frequency scaling, idle states).
//   - It covers CPU power only. Memory, disks, network and GPUs are
//     ignored, so accelerator or storage-heavy nodes are underestimated.
//   - Utilisation inside a VM is the guest's view: it does not see the
//     host's other tenants, hyperthread siblings or steal time, and a vCPU
//     is assumed to cost a fixed share of a host.
//   - The table's per-architecture rows are coarse (one row for every
//     Skylake SKU), and clouds sometimes mask the CPU model, in which case
//     the average row is used.
//
// Treat estimator output as a ballpark figure, good for ranking workloads
// on the same node and for order-of-magnitude totals, not for billing or
// comparing nodes. It is always exported as estimated (Meter.Estimated,
// and the "estimator" source label) so it is never mistaken for a
// measurement.
package power
