package sysfs

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
)

var t0 = time.Unix(1_700_000_000, 0)

type tree = sysfstest.Tree

func newTree(t *testing.T) *tree { return sysfstest.NewTree(t) }

var busy = sysfstest.Busy

// A client that opens between two scans is counted from zero, a client
// whose busy time falls is rejected (not credited), and one busier than
// wall time is rejected.
func TestClientsAppearAndMisbehave(t *testing.T) {
	tr := newTree(t)
	hw := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	a := tr.Client(10, "0000:03:00.0", "amdgpu", 1)
	tr.Write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 5e9))
	src, _ := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	src.Read(context.Background(), t0)
	b := tr.Client(11, "0000:03:00.0", "amdgpu", 2)
	tr.Write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 5e9+300e6))
	tr.Write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 100e6))
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if u := rs[0].Usage; u[10] != 300e6 || u[11] != 100e6 {
		t.Fatalf("usage %v", u)
	}
	tr.Write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 1e9))   // backwards
	tr.Write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 100e9)) // 99.9 s busy in 1 s
	tr.Write(filepath.Join(hw, "power1_input"), "9000000000000") // 9 MW
	rs, _ = src.Read(context.Background(), t0.Add(2*time.Second))
	if len(rs[0].Usage) != 0 || rs[0].OK {
		t.Fatalf("bad readings credited: %+v", rs[0])
	}
	n := src.Rejects().Counts()
	if n["backwards"] != 1 || n["too_fast"] != 1 || n["out_of_range"] != 1 {
		t.Errorf("rejections %v", n)
	}
}

// With debugfs's client tables, only the processes listed there are read:
// a DRM client of a process debugfs does not list is not seen.
func TestDebugfsClients(t *testing.T) {
	tr := newTree(t)
	tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	a := tr.Client(10, "0000:03:00.0", "amdgpu", 1)
	b := tr.Client(11, "0000:03:00.0", "amdgpu", 2)
	tr.Write(filepath.Join(tr.Sys, "kernel", "debug", "dri", "128", "clients"),
		"             command   tgid dev master a   uid      magic\n"+
			"         my prog 2a     10 128   n    y     0          0\n")
	src, _ := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	tr.Write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 0))
	tr.Write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 0))
	src.Read(context.Background(), t0)
	tr.Write(a, busy("amdgpu", "0000:03:00.0", 1, "gfx", 2e8))
	tr.Write(b, busy("amdgpu", "0000:03:00.0", 2, "gfx", 3e8))
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if u := rs[0].Usage; len(u) != 1 || u[10] != 2e8 {
		t.Fatalf("usage %v", u)
	}
}

func TestNoDRM(t *testing.T) {
	src, err := Open(Options{SysfsRoot: t.TempDir(), ProcfsRoot: t.TempDir()}, nil)
	if src != nil || err != nil {
		t.Fatal(src, err)
	}
}

// BenchmarkRead8Cards100Procs: 8 amdgpu cards and 100 processes with a
// DRM client each, among 400 other processes with two non-DRM fds each, in
// a fixture tree on disk: the process scan, the hwmon reads and the
// per-client validation. "debugfs" lists the 100 clients' pids in
// <debugfs>/dri/*/clients, as a root exporter with debugfs mounted sees;
// "scan-all" reads every process's fds.
func BenchmarkRead8Cards100Procs(b *testing.B) {
	for _, withDebugfs := range []bool{false, true} {
		name := "scan-all"
		if withDebugfs {
			name = "debugfs"
		}
		b.Run(name, func(b *testing.B) {
			tr := sysfstest.NewTree(b)
			for c := 0; c < 8; c++ {
				tr.Card(c, fmt.Sprintf("0000:%02x:00.0", 0x10+c), "amdgpu", map[string]string{"power1_average": "200000000"})
			}
			table := "             command   tgid dev master a   uid      magic\n"
			for p := 0; p < 500; p++ {
				pid := 1000 + p
				for fd := 0; fd < 2; fd++ {
					tr.Link("/dev/null", filepath.Join(tr.Proc, fmt.Sprint(pid), "fd", fmt.Sprint(fd)))
					tr.Write(filepath.Join(tr.Proc, fmt.Sprint(pid), "fdinfo", fmt.Sprint(fd)), "pos:\t0\n")
				}
				if p >= 100 {
					continue
				}
				pdev := fmt.Sprintf("0000:%02x:00.0", 0x10+p%8)
				f := tr.Client(pid, pdev, "amdgpu", pid)
				tr.Write(f, busy("amdgpu", pdev, pid, "gfx", 0))
				table += fmt.Sprintf("%20s %5d %3d   n    y %5d %10d\n", "python3", pid, 128, 0, 0)
			}
			if withDebugfs {
				tr.Write(filepath.Join(tr.Sys, "kernel", "debug", "dri", "128", "clients"), table)
			}
			src, err := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
			if err != nil || src == nil {
				b.Fatal(err)
			}
			now := t0
			src.Read(context.Background(), now)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				now = now.Add(time.Second)
				rs, _ := src.Read(context.Background(), now)
				if len(rs) != 8 || !rs[0].OK {
					b.Fatal(len(rs))
				}
			}
		})
	}
}

// amdgpu's ROCm work is not in DRM fdinfo: without gpu_busy_percent the
// card's utilization is unknown (so it teaches no idle model); with it,
// the card's own figure is used. An i915 card's utilization is its DRM
// clients' busiest engine, known when the scan succeeded.
func TestUtilizationKnownOnlyWhereMeasured(t *testing.T) {
	tr := newTree(t)
	tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	tr.Card(1, "0000:04:00.0", "amdgpu", map[string]string{"power1_input": "100000000"})
	tr.Write(filepath.Join(tr.Devices, "0000:04:00.0", "gpu_busy_percent"), "37\n")
	tr.Card(2, "0000:05:00.0", "i915", map[string]string{"energy1_input": "100000000"})
	tr.Mkdir(tr.Proc)
	src, _ := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	src.Read(context.Background(), t0)
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	if rs[0].UtilizationKnown || !rs[1].UtilizationKnown || rs[1].Utilization != 0.37 || !rs[2].UtilizationKnown {
		t.Fatalf("amdgpu %v/%v, amdgpu with gpu_busy_percent %v/%v, i915 %v",
			rs[0].Utilization, rs[0].UtilizationKnown, rs[1].Utilization, rs[1].UtilizationKnown, rs[2].UtilizationKnown)
	}
}

// An AMD APU (its KFD node has CPU cores
// and SIMDs) reports socket power, CPU included: it is not a GPU device,
// and APUs names it for the meters to leave out; a discrete card beside
// it is read as usual.
func TestAPUIsNotAGPU(t *testing.T) {
	tr := newTree(t)
	tr.Card(0, "0000:c1:00.0", "amdgpu", map[string]string{"power1_input": "25000000"})
	tr.KFDNode(1, "0000:c1:00.0", 1234, 16, 48)
	tr.Card(1, "0000:03:00.0", "amdgpu", map[string]string{"power1_average": "100000000"})
	tr.KFDNode(2, "0000:03:00.0", 5678, 0, 304)
	src, err := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ds := src.Devices(); len(ds) != 1 || ds[0].PCIBusID != "0000:03:00.0" {
		t.Fatalf("devices %+v, want the discrete card only", ds)
	}
	if a := APUs(tr.Sys); fmt.Sprint(a) != "[0000:c1:00.0]" {
		t.Fatalf("APUs %v", a)
	}
}

// ROCm work goes through /dev/kfd, which
// DRM fdinfo does not see. Two KFD processes on an MI-class card (120
// CUs) occupying 30 and 10 CUs split its use 3:1, as the occupied share
// × the interval in nanoseconds; the basis says engine_time_kfd. A third
// process on the GPU without a cu_occupancy (an older kernel) cannot be
// attributed: health says kfd_unattributed.
func TestKFDProcessesSplitByTheirUsage(t *testing.T) {
	tr := newTree(t)
	tr.Card(0, "0000:c1:00.0", "amdgpu", map[string]string{"power1_input": "500000000"})
	tr.KFDNode(1, "0000:c1:00.0", 5678, 0, 480)
	tr.KFDProc(10, 5678, 30)
	tr.KFDProc(11, 5678, 10)
	src, err := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	src.Read(context.Background(), t0)
	rs, _ := src.Read(context.Background(), t0.Add(2*time.Second))
	u := rs[0].Usage
	if rs[0].Basis != "engine_time_kfd" || u[10] != 0.25*2e9 || u[11] != 2e9/12 || len(u) != 2 {
		t.Fatalf("basis %q usage %v, want 30/120 and 10/120 of 2 s", rs[0].Basis, u)
	}
	if h := src.Health(); h[0].Reason != "" {
		t.Fatalf("health reason %q with every KFD process attributable", h[0].Reason)
	}
	tr.KFDProc(12, 5678, -1)
	src.Read(context.Background(), t0.Add(3*time.Second))
	if h := src.Health(); h[0].Reason != "kfd_unattributed" {
		t.Fatalf("health %+v, want kfd_unattributed", h[0])
	}
}

// amdgpu gives only power. It is sampled
// at the meter interval and integrated with the trapezoid rule, so a step
// from 100 W to 300 W late in the interval costs what it drew, not 300 W
// × the whole interval as one sample at the read would make it.
func TestAMDGPUPowerTrapezoid(t *testing.T) {
	tr := newTree(t)
	hw := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"power1_average": "100000000"})
	src, err := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil) // samples driven by the test
	if err != nil {
		t.Fatal(err)
	}
	src.Read(context.Background(), t0)
	src.sample(t0.Add(500 * time.Millisecond))
	tr.Write(filepath.Join(hw, "power1_average"), "300000000")
	src.sample(t0.Add(600 * time.Millisecond))
	src.sample(t0.Add(900 * time.Millisecond))
	src.sample(t0.Add(800 * time.Millisecond)) // out of order: folded in time order, once
	rs, _ := src.Read(context.Background(), t0.Add(time.Second))
	// 100 W for 0.5 s, the step over 0.1 s, 300 W for 0.4 s.
	if want := 50.0 + 20 + 120; !rs[0].OK || math.Abs(rs[0].EnergyJ-want) > 1e-9 || rs[0].Method != "power_integrated" || math.Abs(rs[0].PowerW-want) > 1e-9 {
		t.Fatalf("%+v, want %v J", rs[0], want)
	}
	// The background sampler runs at the meter interval and stops on Close.
	bg, _ := Open(Options{SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc, SampleEvery: time.Millisecond}, nil)
	// Polled for up to 5 s rather than a fixed 20 ms, which a loaded
	// machine once spent without scheduling the sampler at all.
	sampled := false
	for deadline := time.Now().Add(5 * time.Second); !sampled && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		bg.mu.Lock()
		sampled = len(bg.cards[0].pw.Pending()) > 0
		bg.mu.Unlock()
	}
	if err := bg.Close(); err != nil || !sampled {
		t.Fatalf("background sampler: sampled %v, close %v", sampled, err)
	}
}

// A DRM class that cannot be listed for another reason than its absence
// (here a file where the directory should be) turns the DRM GPU source
// off with a warning; start-up goes on.
func TestUnreadableDRMDegradesOnlyTheSource(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "class"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "class", "drm"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.WarnLevel)
	src, err := Open(Options{SysfsRoot: root, ProcfsRoot: t.TempDir()}, zap.New(core))
	if src != nil || err != nil {
		t.Fatalf("source %v, error %v: want the source off and no error", src, err)
	}
	if logs.FilterMessageSnippet("cannot list the DRM cards").Len() != 1 {
		t.Errorf("no warning: %v", logs.All())
	}
}
