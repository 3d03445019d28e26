//go:build cgo

package nvml

import (
	"context"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

var t0 = time.Unix(1_700_000_000, 0)

// board is the test's view of one mock device: the energy counter in mJ,
// the SM utilization of each pid sampled once per interval, the memory
// each running process holds.
type board struct {
	energyMJ uint64
	tsUS     uint64
	sm       map[uint32]uint32
	mem      map[uint32]uint64
	gi       map[uint32]uint32 // pid → GPU instance (MIG)
	noUtil   bool
	noEnergy bool
	powerMW  uint32
	lastSeen []uint64
}

func wire(d *server.Device, b *board) {
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_NOT_SUPPORTED }
	d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{}, gonvml.ERROR_NOT_SUPPORTED // Ampere
	}
	d.GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) {
		if b.noEnergy {
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		return b.energyMJ, gonvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, gonvml.Return) { return b.powerMW, gonvml.SUCCESS }
	d.GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{Gpu: 80}, gonvml.SUCCESS
	}
	d.GetProcessUtilizationFunc = func(last uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		b.lastSeen = append(b.lastSeen, last)
		if b.noUtil {
			return nil, gonvml.ERROR_NOT_SUPPORTED
		}
		var out []gonvml.ProcessUtilizationSample
		for pid, u := range b.sm {
			if b.tsUS > last {
				out = append(out, gonvml.ProcessUtilizationSample{Pid: pid, TimeStamp: b.tsUS, SmUtil: u})
			}
		}
		if len(out) == 0 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return out, gonvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]gonvml.ProcessInfo, gonvml.Return) {
		var out []gonvml.ProcessInfo
		for pid, m := range b.mem {
			out = append(out, gonvml.ProcessInfo{Pid: pid, UsedGpuMemory: m, GpuInstanceId: b.gi[pid]})
		}
		return out, gonvml.SUCCESS
	}
}

func twoGPUs(t *testing.T) (*server.Server, []*board) {
	t.Helper()
	srv := dgxa100.NewWithGPUs(gpus.Multiple(2, gpus.A100_SXM4_40GB)...)
	bs := []*board{
		{energyMJ: 5_000_000, sm: map[uint32]uint32{100: 60, 101: 30, 102: 10},
			mem: map[uint32]uint64{100: 1 << 30, 101: 1 << 30, 102: 1 << 30, 103: 1 << 30}},
		{energyMJ: 9_000_000, sm: map[uint32]uint32{200: 45}, mem: map[uint32]uint64{200: 1 << 30}},
	}
	for i, b := range bs {
		wire(srv.Devices[i].(*server.Device), b)
	}
	return srv, bs
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// A driver reload resets the energy counter: the interval spanning it is
// dropped and counted, and no increase is ever negative.
func TestEnergyCounterReset(t *testing.T) {
	srv, bs := twoGPUs(t)
	src, _ := New(srv, Options{}, nil)
	var total float64
	for k := 0; k < 20; k++ {
		switch {
		case k == 10:
			bs[0].energyMJ = 7_000 // reload: back near zero
		case k > 0:
			bs[0].energyMJ += 300_000
		}
		rs, _ := src.Read(context.Background(), t0.Add(time.Duration(k)*time.Second))
		r := rs[0]
		if r.EnergyJ < 0 {
			t.Fatalf("interval %d: negative energy %v", k, r.EnergyJ)
		}
		if k == 10 && r.OK {
			t.Fatalf("the reset interval was credited %v J", r.EnergyJ)
		}
		total += r.EnergyJ
	}
	// 9 intervals before the reset and 9 after it, 300 J each.
	if !near(total, 18*300) {
		t.Errorf("total %v, want %v", total, 18*300.0)
	}
	if src.Rejects().Counts()["backwards"] != 1 {
		t.Errorf("rejections %v", src.Rejects().Counts())
	}
	h := src.Health()
	if len(h) != 2 || !h[0].Up || h[0].Errors != 1 || h[0].Reads != 20 {
		t.Errorf("health %+v", h)
	}
}

// No driver on this machine: the real library cannot be loaded, so Open
// turns the source off with one info line and no error.
func TestOpenWithoutDriver(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	src, err := Open(Options{Mode: "auto"}, zap.New(core))
	if err != nil || src != nil {
		t.Fatalf("Open = %v, %v", src, err)
	}
	if logs.Len() != 1 || logs.All()[0].Level != zap.InfoLevel {
		t.Fatalf("logs: %v", logs.All())
	}
	if src, err := Open(Options{Mode: "off"}, zap.New(core)); src != nil || err != nil || logs.Len() != 1 {
		t.Fatal("off must be silent")
	}
}

// MIG on a Hopper board with GPM: instances are weighted by SMs × their
// measured SM activity over the interval, not by SMs alone; the first
// interval (one GPM sample only) falls back to the SM share.
