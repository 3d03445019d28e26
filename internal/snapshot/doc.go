// Package snapshot is what the stats loop publishes each interval: the
// node's zones, the consumers (cgroups and processes), the workloads, the
// GPUs and the health of every source, in one immutable Snapshot that the
// collectors, the Alloy targets and the per-VM files read without locks.
// The readings it carries (probe counters, cgroup resources, source
// health, estimates) are pkg/reading's types, the ones the sources hand
// the loop; no source imports this package.
package snapshot
