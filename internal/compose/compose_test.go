package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/reading"
)

// fakeNVML lists NVIDIA devices by their NVML index, as a source whose
// other handles failed would.
type fakeNVML struct{ devs []reading.GPUDevice }

func (f fakeNVML) Name() string                   { return "nvml" }
func (f fakeNVML) Devices() []reading.GPUDevice   { return f.devs }
func (f fakeNVML) Close() error                   { return nil }
func (f fakeNVML) Health() []reading.SourceHealth { return nil }
func (f fakeNVML) Read(context.Context, time.Time) ([]reading.GPUReading, error) {
	return nil, nil
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// NVML's device 0 failed to open; the GPU sources read device 1 (accel1).
// The composition tells the meters which accelerator that is, so
// pm_counters keeps accel0 (read by nothing else) and drops accel1: each
// GPU once, none lost.
func TestSkippedHandleKeepsTheAccelMapping(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../../pkg/power/testdata/pm-counters", root)
	dev := reading.GPUDevice{Index: 1, UUID: "GPU-b", PCIBusID: "0000:3b:00.0", Vendor: reading.VendorNVIDIA, Source: "nvml"}
	n, err := Open(context.Background(), Config{
		Power: discover.Config{Source: "auto", SysfsRoot: root, IPMI: "off", HostShare: "",
			LookPath: func(string) (string, error) { return "", os.ErrNotExist }},
		OpenGPUs: func(node.Config, *zap.Logger) (*node.GPUs, error) {
			return node.New(node.Config{}, []gpu.Source{fakeNVML{[]reading.GPUDevice{dev}}}, nil, nil), nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if fmt.Sprint(n.GPUAccels) != "[1]" || n.GPUZone(dev) != 0 {
		t.Fatalf("accels %v, zone %d", n.GPUAccels, n.GPUZone(dev))
	}
	time.Sleep(100 * time.Millisecond)
	dir := filepath.Join(root, "cray", "pm_counters")
	for f, j := range map[string]int{"accel0_energy": 902214 + 10, "accel1_energy": 899873 + 3} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(fmt.Sprintf("%d J\n", j)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := n.Meter.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range s {
		if z.Zone == "gpu" {
			got = append(got, fmt.Sprintf("gpu/%d %.0f J", z.Socket, z.Joules))
		}
	}
	if strings.Join(got, ",") != "gpu/1 10 J" {
		t.Errorf("meter GPU zones %v, want accel0's 10 J as gpu/1", got)
	}
}

// recovering is an NVML that is down at start and lists its devices once
// up: the state a driver still loading leaves the node in.
type recovering struct {
	up   bool
	devs []reading.GPUDevice
}

func (r *recovering) Name() string                   { return "nvml" }
func (r *recovering) Close() error                   { return nil }
func (r *recovering) Health() []reading.SourceHealth { return nil }
func (r *recovering) Down() error {
	if r.up {
		return nil
	}
	return errors.New("nvml init: driver not loaded")
}
func (r *recovering) Devices() []reading.GPUDevice {
	if !r.up {
		return nil
	}
	return r.devs
}
func (r *recovering) Read(_ context.Context, now time.Time) ([]reading.GPUReading, error) {
	var out []reading.GPUReading
	for _, d := range r.Devices() {
		out = append(out, reading.GPUReading{Device: d, OK: true, Interval: time.Second})
	}
	return out, nil
}

// NVML down at start: pm_counters keeps its accelerator zones, numbered
// after every accelerator (gpu/2, gpu/3), never where the GPU stage will
// number the devices it finds later (gpu/0, gpu/1). When NVML comes up,
// pm_counters stops counting the accelerators it now reads, from a
// reading taken at the switch: what accel0 used before stays
// pm_counters' (its zone keeps that total, so a reader that read before
// the switch still sees it), what it uses after is NVML's. Each GPU is
// counted once, before and after, and no zone identity is shared.
func TestExclusionsFollowAGPUSourceThatRecovers(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../../pkg/power/testdata/pm-counters", root)
	nv := &recovering{devs: []reading.GPUDevice{
		{Index: 0, UUID: "GPU-a", PCIBusID: "0000:3b:00.0", Vendor: reading.VendorNVIDIA, Source: "nvml"},
		{Index: 1, UUID: "GPU-b", PCIBusID: "0000:86:00.0", Vendor: reading.VendorNVIDIA, Source: "nvml"},
	}}
	n, err := Open(context.Background(), Config{
		Power: discover.Config{Source: "auto", SysfsRoot: root, IPMI: "off",
			LookPath: func(string) (string, error) { return "", os.ErrNotExist }},
		OpenGPUs: func(node.Config, *zap.Logger) (*node.GPUs, error) {
			return node.New(node.Config{}, []gpu.Source{nv}, nil, nil), nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	gpuZones := func() string {
		s, err := n.Meter.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, z := range s {
			if z.Zone == "gpu" {
				got = append(got, fmt.Sprintf("gpu/%d %.0f J", z.Socket, z.Joules))
			}
		}
		return strings.Join(got, ",")
	}
	acc0 := filepath.Join(root, "cray", "pm_counters", "accel0_energy")
	accel0 := func(j int) {
		t.Helper()
		time.Sleep(100 * time.Millisecond)
		if err := os.WriteFile(acc0, []byte(fmt.Sprintf("%d J\n", j)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_ = n.GPUs.Interval(context.Background(), time.Now())
	if got := gpuZones(); got != "gpu/2 0 J,gpu/3 0 J" {
		t.Fatalf("NVML down: pm_counters' GPU zones %q, want gpu/2,gpu/3", got)
	}
	// 5 J on accel0 before NVML is up: pm_counters', though nothing read
	// the meter between those joules and the switch.
	accel0(902214 + 5)
	nv.up = true
	iv := n.GPUs.Interval(context.Background(), time.Now())
	for i, d := range iv.Devices {
		if z := n.GPUZone(d.Reading.Device); z != i {
			t.Errorf("%s: zone %d, want %d", d.Reading.Device.Key(), z, i)
		}
	}
	// 20 J on accel0 while NVML reads it: the stage's, not pm_counters'.
	accel0(902214 + 25)
	if got := gpuZones(); got != "gpu/2 5 J,gpu/3 0 J" {
		t.Errorf("NVML up: pm_counters' GPU zones %q, want them held at what they counted before the switch (gpu/2 5 J)", got)
	}
	nv.up = false
	_ = n.GPUs.Interval(context.Background(), time.Now())
	// 7 J after NVML went down again: pm_counters' again.
	accel0(902214 + 32)
	if got := gpuZones(); got != "gpu/2 12 J,gpu/3 0 J" {
		t.Errorf("NVML down again: pm_counters' GPU zones %q, want them counting again without the energy NVML counted (gpu/2 12 J)", got)
	}
}

// sysfsLate is a DRM GPU source that reads its card only once up (the
// DRM class was unreadable at start): the card's hwmon chip is then
// hwmon's until the source comes up.
type sysfsLate struct {
	up  bool
	dev reading.GPUDevice
}

func (s *sysfsLate) Name() string                   { return "sysfs" }
func (s *sysfsLate) Close() error                   { return nil }
func (s *sysfsLate) Health() []reading.SourceHealth { return nil }
func (s *sysfsLate) Devices() []reading.GPUDevice {
	if !s.up {
		return nil
	}
	return []reading.GPUDevice{s.dev}
}
func (s *sysfsLate) Read(_ context.Context, now time.Time) ([]reading.GPUReading, error) {
	var out []reading.GPUReading
	for _, d := range s.Devices() {
		out = append(out, reading.GPUReading{Device: d, OK: true, Interval: time.Second})
	}
	return out, nil
}

// An amdgpu card (150 W) whose GPU source comes up after start: hwmon
// counts the card's chip until then (as gpu/0), stops at a reading taken
// at the switch, between two of its polls (its zone then holds that
// total), and counts it again, from the reading at the next switch, if
// the source goes away. The source's zone for the card is gpu/1:
// hwmon's gpu/0 is taken. hwmon is polled every second, so a switch that
// took no reading of its own would lose up to a second of the card.
func TestHwmonLeavesOutAGPUFoundAfterStart(t *testing.T) {
	tr := sysfstest.NewTree(t)
	hw := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "150000000\n"})
	tr.Link(filepath.Dir(filepath.Dir(hw)), filepath.Join(hw, "device"))
	tr.Link(hw, filepath.Join(tr.Sys, "class", "hwmon", filepath.Base(hw)))
	src := &sysfsLate{dev: reading.GPUDevice{Index: 0, PCIBusID: "0000:03:00.0", Vendor: reading.VendorAMD, Source: "sysfs"}}
	opened := time.Now()
	n, err := Open(context.Background(), Config{
		Power: discover.Config{Source: "auto", SysfsRoot: tr.Sys, IPMI: "off", Interval: time.Second,
			LookPath: func(string) (string, error) { return "", os.ErrNotExist }},
		OpenGPUs: func(node.Config, *zap.Logger) (*node.GPUs, error) {
			return node.New(node.Config{}, []gpu.Source{src}, nil, nil), nil
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	gpu0 := func() float64 {
		t.Helper()
		s, err := n.Meter.Read(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range s {
			if z.Zone == "gpu" {
				if z.Socket != 0 {
					t.Fatalf("hwmon's GPU zone is gpu/%d, want gpu/0", z.Socket)
				}
				return z.Joules
			}
		}
		t.Fatal("hwmon reports no GPU zone")
		return 0
	}
	_ = n.GPUs.Interval(context.Background(), time.Now())
	time.Sleep(1300*time.Millisecond - time.Since(opened))
	polled := gpu0() // the poll one second after the first
	if polled < 150*0.9 {
		t.Fatalf("source down: hwmon's gpu/0 %.1f J after its second poll at 150 W, want it counting", polled)
	}
	src.up = true
	iv := n.GPUs.Interval(context.Background(), time.Now())
	switched := gpu0()
	if len(iv.Devices) != 1 || n.GPUZone(iv.Devices[0].Reading.Device) != 1 {
		t.Fatalf("devices %+v, want the card as gpu/1", iv.Devices)
	}
	// The switch read the chip, about 0.3 s after its last poll.
	if switched < polled+150*0.2 || switched > polled+150*0.6 {
		t.Errorf("hwmon's gpu/0 at the switch %.2f J, %.2f J after its last poll; want the 0.3 s since (45 J)", switched, switched-polled)
	}
	time.Sleep(1200 * time.Millisecond)
	if held := gpu0(); held != switched {
		t.Errorf("source up: hwmon's gpu/0 went from %.2f J to %.2f J, want it held", switched, held)
	}
	src.up = false
	_ = n.GPUs.Interval(context.Background(), time.Now())
	resumed := time.Now()
	time.Sleep(1200 * time.Millisecond)
	got := gpu0() - switched
	if lim := 150 * time.Since(resumed).Seconds(); got < 150*0.1 || got > lim {
		t.Errorf("source down again: hwmon's gpu/0 grew %.2f J in %v at 150 W, want it counting from the switch only (at most %.1f J)", got, time.Since(resumed), lim)
	}
}
