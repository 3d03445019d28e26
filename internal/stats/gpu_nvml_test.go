//go:build cgo

package stats

import (
	"context"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/wattrace/wattrace/internal/gpu/nvml/nvmltest"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Moved from pkg/gpu/nvml when the split moved from the GPU sources into
// this stage: the mock NVML readings go through splitGPU.

var gpuT0 = time.Unix(1_700_000_000, 0)

type gpuBoard = nvmltest.Board

func wireGPU(d *server.Device, b *gpuBoard) { nvmltest.Wire(d, b) }

func twoMockGPUs(t *testing.T) (*server.Server, []*gpuBoard) { return nvmltest.TwoGPUs(t) }

func gpuItoa(u uint32) string { return string(rune('0' + u)) }

// Acceptance: three processes time-sliced on GPU 0 at SM 60/30/10 (and a
// fourth holding a context but never sampled), one on GPU 1. Over 100
// intervals dynamic splits 6:3:1 and wholly to the one process, idle is the
// idle model's, and idle + Σ processes = device energy to 1e-9.
func TestTimeSlicedSplit(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	if len(devs) != 2 || devs[0].UUID == "" || devs[0].UUID == devs[1].UUID || devs[0].Model == "" {
		t.Fatalf("devices: %+v", devs)
	}
	idle := []model.IdleModel{&model.ConfiguredIdle{Watts: 50}, &model.ConfiguredIdle{Watts: 40}}
	watts := []uint64{300, 220} // gpuBoard power, so J per 1 s interval
	var res gpuResult
	sum := map[int]float64{}
	var idleSum, energySum [2]float64
	for k := 0; k <= 100; k++ {
		for i, b := range bs {
			if k > 0 {
				b.EnergyMJ += watts[i]*1000 + uint64(k) // a little jitter
			}
			b.TSUS = uint64(k+1) * 1_000_000
		}
		rs, err := src.Read(context.Background(), gpuT0.Add(time.Duration(k)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			if rs[0].OK {
				t.Fatal("first reading is a baseline, not an interval")
			}
			continue
		}
		for i, r := range rs {
			if !r.OK || r.Method != reading.MethodCounter || r.Basis != reading.BasisSMUtil || r.Interval != time.Second {
				t.Fatalf("interval %d gpu %d: %+v", k, i, r)
			}
			splitGPU(r, idle[i], gpuOptions{}, &res)
			var procs float64
			for pid, j := range res.Processes {
				sum[pid] += j
				procs += j
			}
			want := (float64(watts[i]*1000) + float64(k)) / 1000
			if !gpuNear(r.EnergyJ, want) || !gpuNear(res.IdleJ+procs, r.EnergyJ) || res.UnattributedJ != 0 {
				t.Fatalf("interval %d gpu %d: energy %v want %v, idle %v + procs %v", k, i, r.EnergyJ, want, res.IdleJ, procs)
			}
			if !gpuNear(res.IdleJ, []float64{50, 40}[i]) {
				t.Fatalf("idle %v", res.IdleJ)
			}
			idleSum[i] += res.IdleJ
			energySum[i] += r.EnergyJ
		}
	}
	if _, ok := sum[103]; ok {
		t.Errorf("pid 103 holds a context but was never sampled busy, got %v J", sum[103])
	}
	if !gpuNear(sum[100]/sum[102], 6) || !gpuNear(sum[101]/sum[102], 3) {
		t.Errorf("GPU 0 split %v, want 6:3:1", sum)
	}
	if !gpuNear(sum[200], energySum[1]-idleSum[1]) || !gpuNear(idleSum[1], 4000) {
		t.Errorf("GPU 1: pid 200 %v, dynamic %v, idle %v", sum[200], energySum[1]-idleSum[1], idleSum[1])
	}
	if !gpuNear(sum[100]+sum[101]+sum[102]+idleSum[0], energySum[0]) {
		t.Errorf("GPU 0 not conserved")
	}
	// Each call asked only for samples after the last one seen.
	if got := bs[0].LastSeen[5]; got != 5_000_000 {
		t.Errorf("lastSeen at the 6th read = %d, want 5000000", got)
	}
}

// Pre-Volta boards have no energy counter: power is integrated and so
// labelled; without per-process utilization the split is by memory.
func TestPowerAndMemoryFallback(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	bs[0].NoEnergy, bs[0].NoUtil, bs[0].PowerMW = true, true, 250_000
	bs[0].Mem = map[uint32]uint64{100: 3 << 30, 101: 1 << 30}
	src, _ := nvml.New(srv, nvml.Options{}, nil)
	src.Read(context.Background(), gpuT0)
	rs, _ := src.Read(context.Background(), gpuT0.Add(2*time.Second))
	r := rs[0]
	if !r.OK || r.Method != reading.MethodPowerIntegrated || !gpuNear(r.EnergyJ, 500) || r.Basis != reading.BasisMemory {
		t.Fatalf("%+v", r)
	}
	var res gpuResult
	splitGPU(r, &model.ConfiguredIdle{Watts: 100}, gpuOptions{}, &res)
	if !gpuNear(res.Processes[100], 225) || !gpuNear(res.Processes[101], 75) || !gpuNear(res.IdleJ, 200) {
		t.Errorf("%+v", res)
	}
	// A power reading beyond the ceiling is rejected, not integrated.
	bs[0].PowerMW = 5_000_000
	rs, _ = src.Read(context.Background(), gpuT0.Add(3*time.Second))
	if rs[0].OK || rs[0].EnergyJ != 0 || src.Rejects().Counts()["out_of_range"] != 1 {
		t.Errorf("5 kW accepted: %+v", rs[0])
	}
}

// migBoards wires GPU 0 of twoMockGPUs in MIG mode with three instances
// (3, 2 and 1 slices; gi a and b run processes 10, 11 on a and 12 on b, by
// memory 2:6 and 1 GiB) and returns the instance ids and their SMs.
func migBoards(t *testing.T) (srv *server.Server, bs []*gpuBoard, a, b uint32, smA, smB int) {
	srv, bs = twoMockGPUs(t)
	d := srv.Devices[0].(*server.Device)
	if ret, _ := d.SetMigMode(gonvml.DEVICE_MIG_ENABLE); ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	mk := func(profile int) (uint32, int) {
		info, ret := d.GetGpuInstanceProfileInfo(profile)
		if ret != gonvml.SUCCESS {
			t.Fatalf("profile %d: %v", profile, ret)
		}
		gi, ret := d.CreateGpuInstance(&info)
		if ret != gonvml.SUCCESS {
			t.Fatal(ret)
		}
		gii, _ := gi.GetInfo()
		return gii.Id, int(info.MultiprocessorCount)
	}
	a, smA = mk(gonvml.GPU_INSTANCE_PROFILE_3_SLICE)
	b, smB = mk(gonvml.GPU_INSTANCE_PROFILE_2_SLICE)
	_, _ = mk(gonvml.GPU_INSTANCE_PROFILE_1_SLICE) // no processes
	if smA == 0 || smB == 0 || smA == smB {
		t.Fatalf("SMs %d %d", smA, smB)
	}
	d.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		if i > 0 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return &mock.Device{
			GetGpuInstanceIdFunc: func() (int, gonvml.Return) { return int(b), gonvml.SUCCESS },
			GetUUIDFunc:          func() (string, gonvml.Return) { return "MIG-b", gonvml.SUCCESS },
		}, gonvml.SUCCESS
	}
	bs[0].Mem = map[uint32]uint64{10: 2 << 30, 11: 6 << 30, 12: 1 << 30}
	bs[0].GI = map[uint32]uint32{10: a, 11: a, 12: b}
	return srv, bs, a, b, smA, smB
}

// MIG: the gpuBoard's energy splits among instances by SMs (among those that
// run processes), then among each instance's processes by memory held;
// idle + Σ processes = gpuBoard energy.
func TestMIGSplit(t *testing.T) {
	srv, bs, a, b, smA, smB := migBoards(t)
	src, _ := nvml.New(srv, nvml.Options{}, nil)
	src.Read(context.Background(), gpuT0)
	bs[0].EnergyMJ += 400_000
	rs, _ := src.Read(context.Background(), gpuT0.Add(time.Second))
	r := rs[0]
	if len(r.Instances) != 3 || r.Instances[1].UUID != "MIG-b" || r.Instances[1].ID != int(b) || r.Instances[0].UUID != "" {
		t.Fatalf("instances %+v", r.Instances)
	}
	var res gpuResult
	splitGPU(r, &model.ConfiguredIdle{Watts: 60}, gpuOptions{}, &res)
	dyn := 340.0
	fa := float64(smA) / float64(smA+smB)
	want := map[int]float64{10: dyn * fa / 4, 11: dyn * fa * 3 / 4, 12: dyn * (1 - fa)}
	var sum float64
	for pid, w := range want {
		if !gpuNear(res.Processes[pid], w) {
			t.Errorf("pid %d: %v want %v", pid, res.Processes[pid], w)
		}
		sum += res.Processes[pid]
	}
	if !gpuNear(sum+res.IdleJ, 400) || res.UnattributedJ != 0 || !gpuNear(res.IdleJ, 60) {
		t.Errorf("not conserved: %v + %v (unattributed %v)", sum, res.IdleJ, res.UnattributedJ)
	}
	if !gpuNear(res.Instances["0."+gpuItoa(a)], dyn*fa) {
		t.Errorf("instances %v", res.Instances)
	}
}

// MIG on a Hopper gpuBoard with GPM: instances are weighted by SMs × their
// measured SM activity over the interval, not by SMs alone; the first
// interval (one GPM sample only) falls back to the SM share.
func TestMIGSplitGPM(t *testing.T) {
	srv := dgxh100.New()
	for _, o := range srv.Devices[1:] {
		wireGPU(o.(*server.Device), &gpuBoard{})
	}
	d := srv.Devices[0].(*server.Device)
	b := &gpuBoard{EnergyMJ: 1_000_000}
	wireGPU(d, b)
	d.SetMigMode(gonvml.DEVICE_MIG_ENABLE)
	var ids []uint32
	var sms []int
	for _, p := range []int{gonvml.GPU_INSTANCE_PROFILE_3_SLICE, gonvml.GPU_INSTANCE_PROFILE_2_SLICE} {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		if ret != gonvml.SUCCESS {
			t.Fatal(ret)
		}
		gi, _ := d.CreateGpuInstance(&info)
		gii, _ := gi.GetInfo()
		ids, sms = append(ids, gii.Id), append(sms, int(info.MultiprocessorCount))
	}
	b.Mem = map[uint32]uint64{10: 1 << 30, 20: 1 << 30}
	b.GI = map[uint32]uint32{10: ids[0], 20: ids[1]}
	// Each GPM sample remembers the instance and the interval it was
	// taken in; the metric is the instance's SM activity in that interval.
	activity := map[uint32]float64{ids[0]: 20, ids[1]: 90}
	type taken struct{ gi, k int }
	var k int
	where := map[*mock.GpmSample]taken{}
	d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
	}
	srv.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		return &mock.GpmSample{FreeFunc: func() gonvml.Return { return gonvml.SUCCESS }}, gonvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(gi int, s gonvml.GpmSample) gonvml.Return {
		where[s.(*mock.GpmSample)] = taken{gi, k}
		return gonvml.SUCCESS
	}
	srv.GpmMetricsGetFunc = func(m *gonvml.GpmMetricsGetType) gonvml.Return {
		a, b := where[m.Sample1.(*mock.GpmSample)], where[m.Sample2.(*mock.GpmSample)]
		if a.gi != b.gi || b.k != a.k+1 || m.Metrics[0].MetricId != uint32(gonvml.GPM_METRIC_SM_UTIL) {
			t.Errorf("GPM samples %+v %+v", a, b)
		}
		m.Metrics[0].Value = activity[uint32(b.gi)]
		return gonvml.SUCCESS
	}
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var res gpuResult
	for k = 0; k < 3; k++ {
		b.EnergyMJ += 500_000
		rs, _ := src.Read(context.Background(), gpuT0.Add(time.Duration(k)*time.Second))
		r := rs[0]
		if k == 0 {
			if r.Instances[0].WeightBasis != "sm_share" {
				t.Fatalf("first interval: %+v", r.Instances)
			}
			continue
		}
		splitGPU(r, &model.ConfiguredIdle{Watts: 100}, gpuOptions{}, &res)
		wa, wb := float64(sms[0])*20, float64(sms[1])*90
		if r.Instances[0].WeightBasis != "gpm_sm_util" || !gpuNear(res.Processes[10], 400*wa/(wa+wb)) ||
			!gpuNear(res.Processes[20], 400*wb/(wa+wb)) || !gpuNear(res.Processes[10]+res.Processes[20]+res.IdleJ, 500) {
			t.Fatalf("interval %d: %+v, split %v", k, r.Instances, res.Processes)
		}
	}
}

// A MIG board has no device utilization in NVML: its intervals are of
// unknown utilization, not idle, so the learned idle model (default
// threshold 0) learns nothing from them, however busy they are.
func TestMIGUnknownUtilizationTeachesNoIdle(t *testing.T) {
	srv, bs, _, _, _, _ := migBoards(t)
	srv.Devices[0].(*server.Device).GetUtilizationRatesFunc = func() (gonvml.Utilization, gonvml.Return) {
		return gonvml.Utilization{}, gonvml.ERROR_NOT_SUPPORTED
	}
	src, _ := nvml.New(srv, nvml.Options{}, nil)
	learn := model.NewLearnedIdle(0)
	var res gpuResult
	for k := 0; k < 4; k++ {
		bs[0].EnergyMJ += 400_000
		rs, _ := src.Read(context.Background(), gpuT0.Add(time.Duration(k)*time.Second))
		if k == 0 {
			continue
		}
		if rs[0].UtilizationKnown {
			t.Fatalf("MIG utilization reported known: %+v", rs[0])
		}
		splitGPU(rs[0], learn, gpuOptions{}, &res)
		if res.IdleJ != 0 || !gpuNear(res.DynamicJ, 400) {
			t.Fatalf("interval %d: idle %v dynamic %v", k, res.IdleJ, res.DynamicJ)
		}
	}
	if learn.Learned() {
		t.Errorf("idle learned from busy MIG intervals: %v W", learn.Watts())
	}
}

// The basis of a MIG board stays "memory" in intervals where no instance
// is active, so the per-process series' basis label does not churn.
func TestMIGBasisStable(t *testing.T) {
	srv, bs, _, _, _, _ := migBoards(t)
	src, _ := nvml.New(srv, nvml.Options{}, nil)
	var res gpuResult
	for k := 0; k < 3; k++ {
		if k == 2 {
			bs[0].Mem = nil // no process on any instance
		}
		bs[0].EnergyMJ += 400_000
		rs, _ := src.Read(context.Background(), gpuT0.Add(time.Duration(k)*time.Second))
		if k == 0 {
			continue
		}
		splitGPU(rs[0], &model.ConfiguredIdle{Watts: 60}, gpuOptions{}, &res)
		if res.Basis != reading.BasisMemory {
			t.Fatalf("interval %d: basis %q", k, res.Basis)
		}
	}
	if !gpuNear(res.UnattributedJ, 340) {
		t.Errorf("quiet interval: unattributed %v", res.UnattributedJ)
	}
}
