//go:build cgo

// Package nvmltest holds go-nvml mock devices whose readings a test sets,
// shared by the NVML source's tests and the stats loop's GPU tests.
package nvmltest

import (
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// Board is a test's view of one mock device: the energy counter in mJ,
// the SM utilization of each pid sampled once per interval, the memory
// each running process holds.
type Board struct {
	EnergyMJ uint64
	TSUS     uint64
	SM       map[uint32]uint32
	Mem      map[uint32]uint64
	GI       map[uint32]uint32 // pid → GPU instance (MIG)
	NoUtil   bool
	NoEnergy bool
	// EnergyErr, when set, is what the energy counter call returns (a
	// transient driver error rather than NoEnergy's NOT_SUPPORTED).
	EnergyErr gonvml.Return
	PowerMW   uint32
	LastSeen  []uint64
}

// Wire answers the device's NVML calls from b.
func Wire(d *server.Device, b *Board) {
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED // Ampere
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) {
		if b.NoEnergy {
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		if b.EnergyErr != gonvml.SUCCESS {
			return 0, b.EnergyErr
		}
		return b.EnergyMJ, gonvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return b.PowerMW, gonvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{Gpu: 80}, gonvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		b.LastSeen = append(b.LastSeen, last)
		if b.NoUtil {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		}
		var out []gonvml.ProcessUtilizationSample
		for pid, u := range b.SM {
			if b.TSUS > last {
				out = append(out, gonvml.ProcessUtilizationSample{Pid: pid, TimeStamp: b.TSUS, SmUtil: u})
			}
		}
		if len(out) == 0 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return out, gonvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		var out []gonvml.ProcessInfo
		for pid, m := range b.Mem {
			out = append(out, gonvml.ProcessInfo{Pid: pid, UsedGpuMemory: m, GpuInstanceId: b.GI[pid]})
		}
		return out, gonvml.SUCCESS
	}
}

// TwoGPUs is a DGX A100 mock with two GPUs: three processes time-sliced
// on GPU 0 at SM utilization 60/30/10 (and a fourth holding memory only),
// one on GPU 1.
func TwoGPUs(t testing.TB) (*server.Server, []*Board) {
	t.Helper()
	srv := dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	bs := []*Board{
		{EnergyMJ: 5_000_000, SM: map[uint32]uint32{100: 60, 101: 30, 102: 10},
			Mem: map[uint32]uint64{100: 1 << 30, 101: 1 << 30, 102: 1 << 30, 103: 1 << 30}},
		{EnergyMJ: 9_000_000, SM: map[uint32]uint32{200: 45}, Mem: map[uint32]uint64{200: 1 << 30}},
	}
	for i, b := range bs {
		Wire(srv.Devices[i].(*server.Device), b)
	}
	return srv, bs
}
