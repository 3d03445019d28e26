// Package nvml reads NVIDIA GPUs through NVML (github.com/NVIDIA/go-nvml),
// which dlopens libnvidia-ml.so.1 at run time. go-nvml does not compile
// without cgo, so the reader is built only with cgo; a binary built with
// CGO_ENABLED=0 gets Open from nocgo.go, which reports the source off and
// why. A host without the driver gets the source off, one info line and no
// error, from the same binary.
//
// What is measured and what is apportioned (docs/gpu.md has the long form):
//   - measured: the board's energy (GetTotalEnergyConsumption, mJ, Volta
//     and newer), else its power (GetPowerUsage, mW; a 1 s average on
//     Ampere except GA100 and newer) integrated over the interval; its
//     utilization; per-process SM utilization samples; per-process memory.
//   - apportioned: each process's energy, by time-weighted SM utilization
//     (or by memory held where per-process utilization is unsupported);
//     under MIG, each instance's energy by SMs × GPM SM activity (Hopper
//     and newer) or else by its share of SMs among the instances running
//     processes, then each process's by memory held.
package nvml
