// Package cgroupstats reads the resource counters HPC users look at for one
// workload cgroup: CPU user/system time, memory usage, limit and failures,
// block IO per device, pressure stall information and the task count. It
// reads cgroup v1 (each controller under its own mount, the same relative
// path under each, as Slurm lays jobs out), cgroup v2, and hybrid hosts that
// have both.
//
// A Read opens a fixed list of files (no directory walks) into buffers the
// Reader keeps, so polling every workload every interval stays cheap.
package cgroupstats
