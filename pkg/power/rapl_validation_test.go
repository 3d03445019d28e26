package power

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// energy_uj stepping back 100 J is no wraparound (on
// main it credited 262,041 J in one second), and a forward jump of 200 kJ
// in 1 s (200 kW) is no reading. Both are counted and logged at warn; the
// good intervals around them are credited in full.
func TestRAPLRejectsStepBackAndJump(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", 20_000_000_000, maxPkgUJ)
	core, logs := observer.New(zapcore.WarnLevel)
	r, _, err := testRAPLClock(root, MeterOptions{Log: zap.New(core)})
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	step := func(uj uint64, want float64) {
		t.Helper()
		setEnergy(t, root, "intel-rapl:0", uj)
		if got := joulesOf(t, mustRead(t, r), "package", 0); got != want {
			t.Fatalf("energy_uj %d: package = %v J, want %v", uj, got, want)
		}
	}
	step(20_050_000_000, 50)   // +50 J in 1 s
	step(19_950_000_000, 50)   // 100 J back: rejected, not 262,041 J
	step(20_150_000_000, 150)  // continues from the old baseline: the glitch lost nothing
	step(220_150_000_000, 150) // +200 kJ in 1 s: rejected
	step(20_200_000_000, 200)  // back on track: +50 J
	h := r.Health()[0]
	if h.Rejected["backwards"] != 1 || h.Rejected["too_fast"] != 1 || !h.Up {
		t.Fatalf("health %+v, want rejected backwards=1 too_fast=1, up", h)
	}
	if n := logs.FilterMessage("rejected reading, not credited").Len(); n != 2 {
		t.Fatalf("%d warn lines about rejected readings, want 2 (one per reason)", n)
	}
}

// A ceiling from configuration applies per zone: package at 100 W rejects
// 150 J in one second that the 1 kW default would accept.
func TestRAPLConfiguredCeiling(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", 0, maxPkgUJ)
	r, _, err := testRAPLClock(root, MeterOptions{MaxWatts: MaxWatts{reading.ZonePackage: 100}})
	if err != nil {
		t.Fatal(err)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 150_000_000)
	if got := joulesOf(t, mustRead(t, r), "package", 0); got != 0 {
		t.Fatalf("150 J in 1 s under a 100 W ceiling credited %v J", got)
	}
	setEnergy(t, root, "intel-rapl:0", 230_000_000)
	if got := joulesOf(t, mustRead(t, r), "package", 0); got != 80 {
		t.Fatalf("after +80 J: %v J, want 80", got)
	}
}

// A max_energy_range_uj of 0 on one sub-zone no longer drops the meter: the
// sub-zone is read as a non-wrapping counter, and the package is intact. A
// sub-zone whose range is unreadable is left out alone.
func TestRAPLZeroRangeSubZone(t *testing.T) {
	root := t.TempDir()
	writeZone(t, root, "intel-rapl:0", "package-0", 1_000_000, maxPkgUJ)
	writeZone(t, root, "intel-rapl:0:0", "dram", 500_000, 0)
	writeZone(t, root, "intel-rapl:0:1", "core", 500_000, maxPkgUJ)
	writeFile(t, filepath.Join(root, "class", "powercap", "intel-rapl:0:1", "max_energy_range_uj"), "garbage\n")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatalf("one bad sub-zone dropped the meter: %v", err)
	}
	if d := r.Dropped(); len(d) != 1 {
		t.Fatalf("dropped %q, want only the core sub-zone", d)
	}
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0", 3_000_000)
	setEnergy(t, root, "intel-rapl:0:0", 1_500_000)
	got := mustRead(t, r)
	if len(got) != 2 || joulesOf(t, got, "package", 0) != 2 || joulesOf(t, got, "dram", 0) != 1 {
		t.Fatalf("samples %+v, want package 2 J and dram 1 J", got)
	}
	// Without a range a drop is a reset, not a wrap: nothing is credited
	// for that interval, and counting resumes from the new value.
	setEnergy(t, root, "intel-rapl:0:0", 100_000)
	mustRead(t, r)
	setEnergy(t, root, "intel-rapl:0:0", 600_000)
	if j := joulesOf(t, mustRead(t, r), "dram", 0); j != 1.5 {
		t.Fatalf("dram after a reset = %v J, want 1.5", j)
	}
	_ = time.Second
}
