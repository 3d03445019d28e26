//go:build cgo

package nvml

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/gpu/nvml/nvmltest"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

var t0 = time.Unix(1_700_000_000, 0)

type board = nvmltest.Board

func twoGPUs(t *testing.T) (*server.Server, []*board) { return nvmltest.TwoGPUs(t) }

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
			bs[0].EnergyMJ = 7_000 // reload: back near zero
		case k > 0:
			bs[0].EnergyMJ += 300_000
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
// turns the source off with one info line and no error. Whether there is
// a driver is asked of NVML itself, not of Open, so a broken Open can't
// make the test skip: where Init succeeds the test is about another
// machine.
func TestOpenWithoutDriver(t *testing.T) {
	lib := gonvml.New()
	if ret := lib.Init(); ret == gonvml.SUCCESS {
		lib.Shutdown()
		testenv.NotApplicable(t, "this host has an NVIDIA driver (NVML initialised)")
	}
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

// A driver older than GPM (R520) and MIG (R450) lacks their symbols:
// go-nvml binds lazily, so calling one would kill the process. The
// source looks each up first and never calls a missing one; the board
// still reads its energy and splits by SM utilization.
func TestMissingSymbolsAreNeverCalled(t *testing.T) {
	srv, bs := twoGPUs(t)
	missing := map[string]bool{}
	for _, s := range append(append([]string(nil), symGPM...), symMIG...) {
		missing[s] = true
	}
	var looked []string
	srv.LookupSymbolFunc = func(s string) error {
		looked = append(looked, s)
		if missing[s] {
			return errors.New("undefined symbol: " + s)
		}
		return nil
	}
	for _, d := range srv.Devices {
		d := d.(*server.Device)
		d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
			panic("undefined symbol: nvmlGpmQueryDeviceSupport")
		}
		d.GetMigModeFunc = func() (int, int, gonvml.Return) { panic("undefined symbol: nvmlDeviceGetMigMode") }
	}
	src, err := New(srv, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(looked) < len(missing) {
		t.Fatalf("looked up %v", looked)
	}
	src.Read(context.Background(), t0)
	bs[0].EnergyMJ += 250_000
	bs[0].TSUS = 2_000_000
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if !rs[0].OK || !near(rs[0].EnergyJ, 250) || rs[0].Basis != reading.BasisSMUtil {
		t.Fatalf("reading %+v", rs[0])
	}
}

// The energy counter failing at start with a transient error (not
// NOT_SUPPORTED) does not pin the device to power integration: it is
// asked again, and once it answers the energy comes from it, the
// switch losing no interval's energy and counting none twice.
func TestEnergyCounterRetriedAfterAStartError(t *testing.T) {
	srv, bs := twoGPUs(t)
	bs[0].EnergyErr = gonvml.ERROR_UNKNOWN
	bs[0].PowerMW = 250_000
	src, _ := New(srv, Options{}, nil)
	var methods []reading.GPUMethod
	var total float64
	for k := 0; k < 6; k++ {
		if k == 2 {
			bs[0].EnergyErr = gonvml.SUCCESS
		}
		if k > 0 {
			bs[0].EnergyMJ += 300_000 // 300 W over each second
		}
		rs, _ := src.Read(context.Background(), t0.Add(time.Duration(k)*time.Second))
		methods = append(methods, rs[0].Method)
		if rs[0].OK {
			total += rs[0].EnergyJ
		}
	}
	if methods[1] != reading.MethodPowerIntegrated || methods[5] != reading.MethodCounter {
		t.Fatalf("methods %v: want power integration, then the counter", methods)
	}
	// Intervals 1 and 2 integrate 250 W; 3 to 5 count 300 J each.
	if !near(total, 2*250+3*300) {
		t.Errorf("total %v J, want %v", total, 2*250+3*300.0)
	}
}

// A Hopper board in MIG mode keeps two GPM samples per instance. When
// every GPU fails and NVML is initialised again (a driver reload), the
// old samples are freed, not leaked at each reload; Close frees the rest.
func TestGPMSamplesFreedOnReinit(t *testing.T) {
	srv := dgxh100.New()
	var bs []*board
	for _, o := range srv.Devices {
		b := &board{EnergyMJ: 1_000_000}
		nvmltest.Wire(o.(*server.Device), b)
		bs = append(bs, b)
	}
	d := srv.Devices[0].(*server.Device)
	d.SetMigMode(gonvml.DEVICE_MIG_ENABLE)
	for _, p := range []int{gonvml.GPU_INSTANCE_PROFILE_3_SLICE, gonvml.GPU_INSTANCE_PROFILE_2_SLICE} {
		info, ret := d.GetGpuInstanceProfileInfo(p)
		if ret != gonvml.SUCCESS {
			t.Fatal(ret)
		}
		if _, ret := d.CreateGpuInstance(&info); ret != gonvml.SUCCESS {
			t.Fatal(ret)
		}
	}
	d.GpmQueryDeviceSupportFunc = func() (gonvml.GpmSupport, gonvml.Return) {
		return gonvml.GpmSupport{IsSupportedDevice: 1}, gonvml.SUCCESS
	}
	live := map[*mock.GpmSample]bool{}
	srv.GpmSampleAllocFunc = func() (gonvml.GpmSample, gonvml.Return) {
		smp := &mock.GpmSample{}
		smp.FreeFunc = func() gonvml.Return { delete(live, smp); return gonvml.SUCCESS }
		live[smp] = true
		return smp, gonvml.SUCCESS
	}
	d.GpmMigSampleGetFunc = func(int, gonvml.GpmSample) gonvml.Return { return gonvml.SUCCESS }
	srv.GpmMetricsGetFunc = func(m *gonvml.GpmMetricsGetType) gonvml.Return { m.Metrics[0].Value = 50; return gonvml.SUCCESS }
	src, err := New(srv, Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	read := func(k int) {
		for _, b := range bs {
			b.EnergyMJ += 100_000
		}
		_, _ = src.Read(context.Background(), t0.Add(time.Duration(k)*time.Second))
	}
	read(0)
	read(1)
	if len(live) != 4 {
		t.Fatalf("%d GPM samples allocated, want 2 per instance", len(live))
	}
	for _, b := range bs {
		b.EnergyErr = gonvml.ERROR_GPU_IS_LOST
	}
	read(2) // every GPU fails: NVML shuts down
	for _, b := range bs {
		b.EnergyErr = gonvml.SUCCESS
	}
	read(3) // initialised again
	read(4)
	if len(live) != 4 {
		t.Errorf("%d GPM samples live after a re-initialisation, want the new 4 only", len(live))
	}
	src.Close()
	if len(live) != 0 {
		t.Errorf("%d GPM samples live after Close", len(live))
	}
}

// A MIG board whose instances cannot be listed says so: the reading's
// usage is unknown and the device's health carries the reason, until a
// listing succeeds again.
func TestMIGListingFailureHasAReason(t *testing.T) {
	srv := dgxh100.New()
	for _, o := range srv.Devices {
		nvmltest.Wire(o.(*server.Device), &board{EnergyMJ: 1_000_000})
	}
	d := srv.Devices[0].(*server.Device)
	d.SetMigMode(gonvml.DEVICE_MIG_ENABLE)
	info, _ := d.GetGpuInstanceProfileInfo(gonvml.GPU_INSTANCE_PROFILE_3_SLICE)
	if _, ret := d.CreateGpuInstance(&info); ret != gonvml.SUCCESS {
		t.Fatal(ret)
	}
	list := d.GetGpuInstancesFunc
	d.GetGpuInstancesFunc = func(*gonvml.GpuInstanceProfileInfo) ([]gonvml.GpuInstance, gonvml.Return) {
		return nil, gonvml.ERROR_UNKNOWN
	}
	src, _ := New(srv, Options{}, nil)
	rs, _ := src.Read(context.Background(), t0)
	if !rs[0].UsageUnknown || src.Health()[0].Reason != "mig_instances_unlisted" {
		t.Errorf("usage unknown %v, health %+v", rs[0].UsageUnknown, src.Health()[0])
	}
	d.GetGpuInstancesFunc = list
	rs, _ = src.Read(context.Background(), t0.Add(time.Second))
	if rs[0].UsageUnknown || src.Health()[0].Reason != "" || len(rs[0].Instances) != 1 {
		t.Errorf("after a good listing: usage unknown %v, %d instances, health %+v", rs[0].UsageUnknown, len(rs[0].Instances), src.Health()[0])
	}
}

// A board without the energy counter: its power, sampled within the
// interval and at its end, is integrated with the trapezoid rule, as
// amdgpu's is. 100 W at the start, 500 W half-way, 300 W at the end of
// a 1 s interval is 150 + 200 = 350 J; one sample per interval taken as
// a rectangle said 300 J.
func TestPowerBoardTrapezoid(t *testing.T) {
	srv, bs := twoGPUs(t)
	bs[0].NoEnergy = true
	src, _ := New(srv, Options{}, nil)
	defer src.Close()
	bs[0].PowerMW = 100_000
	if rs, _ := src.Read(context.Background(), t0); rs[0].OK || rs[0].Method != reading.MethodPowerIntegrated {
		t.Fatalf("first read: %+v", rs[0])
	}
	bs[0].PowerMW = 500_000
	src.samplePower(src.devs[0], t0.Add(500*time.Millisecond))
	bs[0].PowerMW = 300_000
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if !rs[0].OK || !near(rs[0].EnergyJ, 350) || rs[0].Interval != time.Second {
		t.Errorf("interval: %v J over %v (ok %v), want 350 J over 1s", rs[0].EnergyJ, rs[0].Interval, rs[0].OK)
	}
	// A sample above the board's ceiling is rejected, not integrated.
	bs[0].PowerMW = 5_000_000
	src.samplePower(src.devs[0], t0.Add(1500*time.Millisecond))
	bs[0].PowerMW = 300_000
	rs, _ = src.Read(context.Background(), t0.Add(2*time.Second))
	if !rs[0].OK || !near(rs[0].EnergyJ, 300) {
		t.Errorf("after a rejected sample: %v J, want 300 J", rs[0].EnergyJ)
	}
}

// With SampleEvery the board is sampled in the background between reads.
func TestPowerBoardSampledInTheBackground(t *testing.T) {
	srv, bs := twoGPUs(t)
	bs[0].NoEnergy = true
	bs[0].PowerMW = 200_000
	src, _ := New(srv, Options{SampleEvery: 10 * time.Millisecond}, nil)
	defer src.Close()
	start := time.Now()
	_, _ = src.Read(context.Background(), start)
	time.Sleep(100 * time.Millisecond)
	src.mu.Lock()
	n := len(src.devs[0].pw.Pending())
	src.mu.Unlock()
	if n < 3 {
		t.Errorf("%d background samples in 100 ms at 10 ms", n)
	}
	end := time.Now()
	rs, _ := src.Read(context.Background(), end)
	if !rs[0].OK || !near(rs[0].EnergyJ, 200*end.Sub(start).Seconds()) {
		t.Errorf("%v J over %v, want 200 W's", rs[0].EnergyJ, end.Sub(start))
	}
}

// A device not reached before the step's deadline is not credited: its
// reading is not OK, its health counts a late reading with the reason,
// and the next read's energy spans both intervals.
func TestDeviceNotReadAfterTheDeadline(t *testing.T) {
	srv, bs := twoGPUs(t)
	src, _ := New(srv, Options{}, nil)
	if _, err := src.Read(context.Background(), t0); err != nil {
		t.Fatal(err)
	}
	bs[0].EnergyMJ += 300_000
	done, cancel := context.WithDeadline(context.Background(), t0)
	cancel()
	rs, _ := src.Read(done, t0.Add(time.Second))
	if len(rs) != 2 || rs[0].OK || rs[0].EnergyJ != 0 || !rs[0].UsageUnknown || rs[0].Method != reading.MethodCounter {
		t.Fatalf("past the deadline: %+v, want 2 readings, not OK, no energy, usage unknown", rs)
	}
	// The devices share the source's rejection counts: one late each.
	h := src.Health()
	if h[0].Up || h[0].Rejected["late"] != 2 || h[0].Reason != reading.ReasonDeadline {
		t.Errorf("health past the deadline: %+v, want down, 2 late, %s", h[0], reading.ReasonDeadline)
	}
	bs[0].EnergyMJ += 300_000
	rs, _ = src.Read(context.Background(), t0.Add(2*time.Second))
	if !rs[0].OK || !near(rs[0].EnergyJ, 600) || rs[0].Interval != 2*time.Second {
		t.Errorf("the next read: %+v, want OK, 600 J over 2 s", rs[0])
	}
	if h := src.Health(); !h[0].Up || h[0].Reason != "" || h[0].Rejected["late"] != 2 {
		t.Errorf("health after a good read: %+v", h[0])
	}
}
