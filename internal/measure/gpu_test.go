package measure

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fakeGPU stands in for a GPU this machine lacks: it draws watts while
// the test runs, and like NVML's per-process samples it samples the
// processes "using" it every 50 ms over each interval: a process whose
// environment holds marker weighs 3 per sample, the test process 1.
type fakeGPU struct {
	watts  float64
	marker string

	mu      sync.Mutex
	last    time.Time
	weights map[int]float64
	// marked and all are this interval's sampled weights of the marked
	// processes and of every user; reads logs each interval handed out.
	marked, all float64
	reads       []fakeRead
	stop        chan struct{}
	wg          sync.WaitGroup
}

func newFakeGPU(t *testing.T, watts float64, marker string) *fakeGPU {
	f := &fakeGPU{watts: watts, marker: marker, last: time.Now(), weights: map[int]float64{}, stop: make(chan struct{})}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-f.stop:
				return
			case <-tick.C:
			}
			users := f.users()
			f.mu.Lock()
			for pid, w := range users {
				f.weights[pid] += w
				f.all += w
				if pid != os.Getpid() {
					f.marked += w
				}
			}
			f.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(f.stop); f.wg.Wait() })
	return f
}

// fakeRead is one interval the fake handed out: its length and the marked
// processes' share of its samples (0 when it had none).
type fakeRead struct {
	dt    time.Duration
	share float64
}

// markedShare is the marked processes' share of the GPU's energy over the
// reads after the first (the baseline measure takes as the command
// starts), weighting each interval by its length since the fake's power
// is constant. Under load the command starts late and an interval after
// its exit holds only the test process, so this is below 3/4 by as much
// as the machine delays the command (0.745-0.75 on a quiet machine).
func (f *fakeGPU) markedShare() float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var num, den float64
	for _, r := range f.reads[1:] {
		num += r.share * r.dt.Seconds()
		den += r.dt.Seconds()
	}
	return num / den
}

func (f *fakeGPU) users() map[int]float64 {
	out := map[int]float64{os.Getpid(): 1}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err == nil && strings.Contains(string(env), f.marker) {
			out[pid] = 3
		}
	}
	return out
}

var dev = reading.GPUDevice{Index: 0, UUID: "GPU-fake", Model: "fake", Vendor: reading.VendorNVIDIA, Source: "nvml"}

func (f *fakeGPU) Name() string                   { return "nvml" }
func (f *fakeGPU) Devices() []reading.GPUDevice   { return []reading.GPUDevice{dev} }
func (f *fakeGPU) Close() error                   { return nil }
func (f *fakeGPU) Health() []reading.SourceHealth { return nil }
func (f *fakeGPU) Read(_ context.Context, now time.Time) ([]reading.GPUReading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dt := now.Sub(f.last)
	f.last = now
	usage := f.weights
	f.weights = map[int]float64{}
	r := fakeRead{dt: dt}
	if f.all > 0 {
		r.share = f.marked / f.all
	}
	f.reads = append(f.reads, r)
	f.marked, f.all = 0, 0
	return []reading.GPUReading{{Device: dev, OK: true, EnergyJ: f.watts * dt.Seconds(), Method: reading.MethodCounter,
		Interval: dt, PowerW: f.watts, Usage: usage, Basis: reading.BasisSMUtil}}, nil
}

var _ gpu.Source = (*fakeGPU)(nil)

// A command's processes on a GPU get the GPU's dynamic energy by their
// share of its per-process use: here 3 of every 4 weight units, so 3/4.
func TestGPUShare(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	// The marker is this run's own: another test binary burning with
	// envBurn beside this one (a second checkout's tests) is no user of
	// this fake GPU. It once made the "command" 0.86 of the samples.
	marker := fmt.Sprintf("WATTRACE_MEASURE_TEST_GPU=%d-%d", os.Getpid(), time.Now().UnixNano())
	fake := newFakeGPU(t, 100, marker)
	gpus := func(node.Config, *zap.Logger) (*node.GPUs, error) {
		return node.New(node.Config{}, []gpu.Source{fake}, nil, nil), nil
	}
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr strings.Builder
	args := append([]string{"--json", "-o", out, "--path.sysfs", sys, "--accounting=bpf", "--", "env", marker}, burner(t, 2.5)...)
	if code := mainWith(context.Background(), args, strings.NewReader(""), &stdout, &stderr, []string{"measure"}, gpus); code != 0 {
		t.Fatalf("status %d: %s", code, stderr.String())
	}
	rep := readReport(t, out)
	r := rep.Runs[0]
	var g *Zone
	for i := range r.Zones {
		if r.Zones[i].Zone == "gpu" {
			g = &r.Zones[i]
		}
	}
	if g == nil {
		t.Fatalf("no gpu zone in %+v", r.Zones)
	}
	t.Logf("gpu-0: node %.3f J over %.3f s, command %.3f J, share %.4f", g.NodeJ, r.WallSeconds, g.DynamicJ, g.CPUShare)
	within(t, "GPU energy over the run", g.NodeJ, 100*r.WallSeconds, 0.05)
	share := fake.markedShare()
	if share < 0.7 || share > 0.75+1e-9 {
		t.Errorf("the command held %.4f of the fake GPU's samples, want about 3/4", share)
	}
	within(t, "command's GPU energy", g.DynamicJ, share*g.NodeDynamicJ, 0.01)
	if g.Method != MethodMeasured || g.Source != "nvml" || g.Socket != 0 {
		t.Errorf("zone %+v", *g)
	}
	var pkg float64
	for _, z := range r.Zones {
		if z.Zone == "package" {
			pkg = z.DynamicJ + z.IdleJ
		}
	}
	within(t, "total: package + gpu", r.EnergyJ, pkg+g.DynamicJ+g.IdleJ, 1e-9)
}

// constGPU draws watts on one device, with no process weights.
type constGPU struct {
	dev   reading.GPUDevice
	watts float64
	last  time.Time
}

func (c *constGPU) Name() string                   { return c.dev.Source }
func (c *constGPU) Devices() []reading.GPUDevice   { return []reading.GPUDevice{c.dev} }
func (c *constGPU) Close() error                   { return nil }
func (c *constGPU) Health() []reading.SourceHealth { return nil }
func (c *constGPU) Read(_ context.Context, now time.Time) ([]reading.GPUReading, error) {
	dt := now.Sub(c.last)
	if c.last.IsZero() {
		dt = 0
	}
	c.last = now
	return []reading.GPUReading{{Device: c.dev, OK: true, EnergyJ: c.watts * dt.Seconds(), Method: reading.MethodCounter,
		Interval: dt, PowerW: c.watts, Basis: reading.BasisNone}}, nil
}

// NVML's device 0 and DRM's card0 are two devices with the same vendor
// index: each is a zone of its own, numbered as the exporter numbers them
// (gpu/0, gpu/1), and neither's energy lands in the other's.
func TestGPUZonesKeyedByDeviceNotVendorIndex(t *testing.T) {
	testenv.RequireRoot(t)
	sys := fixturePower(t, wattsPerCPU)
	nv := &constGPU{dev: reading.GPUDevice{Index: 0, UUID: "GPU-nv", PCIBusID: "0000:3b:00.0", Vendor: reading.VendorNVIDIA, Source: "nvml"}, watts: 100}
	amd := &constGPU{dev: reading.GPUDevice{Index: 0, PCIBusID: "0000:03:00.0", Vendor: reading.VendorAMD, Source: "sysfs"}, watts: 40}
	gpus := func(node.Config, *zap.Logger) (*node.GPUs, error) {
		return node.New(node.Config{}, []gpu.Source{nv, amd}, nil, nil), nil
	}
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr strings.Builder
	args := []string{"--json", "-o", out, "--path.sysfs", sys, "--cgroup=none", "--accounting=rusage", "--", "sleep", "0.3"}
	if code := mainWith(context.Background(), args, strings.NewReader(""), &stdout, &stderr, []string{"measure"}, gpus); code != 0 {
		t.Fatalf("status %d: %s", code, stderr.String())
	}
	r := readReport(t, out).Runs[0]
	got := map[string]float64{}
	for _, z := range r.Zones {
		if z.Zone == "gpu" {
			got[fmt.Sprintf("%s/%d", z.Source, z.Socket)] = z.NodeJ / r.WallSeconds
		}
	}
	if len(got) != 2 {
		t.Fatalf("GPU zones %v, want nvml/0 and sysfs/1", got)
	}
	within(t, "nvml/0 power", got["nvml/0"], 100, 0.1)
	within(t, "sysfs/1 power", got["sysfs/1"], 40, 0.1)
}

// A GPU source down at start that comes up during the run: an amdgpu
// card drawing 150 W whose DRM class cannot be listed at start (the real
// GPU sources, on a fixture node with RAPL), so hwmon counts the card's
// chip; the class is listable half a second in, and at the next GPU
// interval the sysfs source reads the card. From that interval on hwmon
// no longer counts it: the card's energy over the run is 150 W × the run
// once, part hwmon's (gpu-0, up to the switch) and part the source's
// (gpu-1, after it), never both.
func TestGPUSourceUpDuringTheRunCountedOnce(t *testing.T) {
	testenv.RequireRoot(t)
	tr := sysfstest.NewTree(t)
	rapl := testenv.CopyFixture(t, "../../pkg/power/testdata/rapl-1socket")
	if err := os.Rename(filepath.Join(rapl, "class", "powercap"), filepath.Join(tr.Sys, "class", "powercap")); err != nil {
		t.Fatal(err)
	}
	hw := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "150000000\n"})
	tr.Link(filepath.Dir(filepath.Dir(hw)), filepath.Join(hw, "device"))
	tr.Link(hw, filepath.Join(tr.Sys, "class", "hwmon", filepath.Base(hw)))
	drm := filepath.Join(tr.Sys, "class", "drm")
	if err := os.Rename(drm, drm+"-later"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(drm, []byte("not a directory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gpus := func(cfg node.Config, log *zap.Logger) (*node.GPUs, error) {
		cfg.NVML, cfg.Rescan = "off", 200*time.Millisecond
		return node.Open(cfg, log)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		_ = os.Remove(drm)
		_ = os.Rename(drm+"-later", drm)
	}()
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr strings.Builder
	args := []string{"--json", "-o", out, "--path.sysfs", tr.Sys, "--cgroup=none", "--accounting=rusage", "--", "sleep", "3.5"}
	if code := mainWith(context.Background(), args, strings.NewReader(""), &stdout, &stderr, []string{"measure"}, gpus); code != 0 {
		t.Fatalf("status %d: %s", code, stderr.String())
	}
	r := readReport(t, out).Runs[0]
	got := map[string]float64{}
	for _, z := range r.Zones {
		if z.Zone == "gpu" {
			got[fmt.Sprintf("%s/%d", z.Source, z.Socket)] = z.NodeJ
		}
	}
	t.Logf("over %.3f s: GPU zones %v", r.WallSeconds, got)
	if len(got) != 2 || got["hwmon/0"] <= 0 || got["sysfs/1"] <= 0 {
		t.Fatalf("GPU zones %v, want hwmon/0 up to the switch and sysfs/1 after it", got)
	}
	within(t, "the card's energy over the run", got["hwmon/0"]+got["sysfs/1"], 150*r.WallSeconds, 0.05)
}

// hwmon is read in the background every second; measure reads it again
// at the command's start and end, so a 0.3 s run of a card drawing 150 W
// gets 45 J, not the 0 J or 150 J of the polls that fell in the run.
func TestLocalSlowMeterReadAtTheRunsEdges(t *testing.T) {
	testenv.RequireRoot(t)
	tr := sysfstest.NewTree(t)
	hw := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "150000000\n"})
	tr.Link(filepath.Dir(filepath.Dir(hw)), filepath.Join(hw, "device"))
	tr.Link(hw, filepath.Join(tr.Sys, "class", "hwmon", filepath.Base(hw)))
	for i := 0; i < 3; i++ {
		rep, code, _ := jsonReport(t, "--path.sysfs", tr.Sys, "--gpu=off", "--cgroup=none", "--accounting=rusage", "--", "sleep", "0.3")
		if code != 0 {
			t.Fatalf("status %d, warnings %q", code, rep.Warnings)
		}
		r := rep.Runs[0]
		found := false
		for _, z := range r.Zones {
			if z.Zone == "gpu" && z.Source == "hwmon" {
				found = true
				within(t, "hwmon's GPU zone over the run", z.NodeJ, 150*r.WallSeconds, 0.05)
			}
		}
		if !found {
			t.Fatalf("no hwmon GPU zone in %+v", r.Zones)
		}
	}
}
