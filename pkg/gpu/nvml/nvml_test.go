//go:build cgo

package nvml

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/nvml/nvmltest"
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
	if !rs[0].OK || !near(rs[0].EnergyJ, 250) || rs[0].Basis != gpu.SMUtil {
		t.Fatalf("reading %+v", rs[0])
	}
}
