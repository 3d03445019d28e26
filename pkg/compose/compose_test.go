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

	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/node"
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
	copyTree(t, "../power/testdata/pm-counters", root)
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
// pm_counters stops reporting the accelerators it now reads: each GPU is
// counted once, before and after, and no zone identity is shared.
func TestExclusionsFollowAGPUSourceThatRecovers(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../power/testdata/pm-counters", root)
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
				got = append(got, fmt.Sprintf("gpu/%d", z.Socket))
			}
		}
		return strings.Join(got, ",")
	}
	_ = n.GPUs.Interval(context.Background(), time.Now())
	if got := gpuZones(); got != "gpu/2,gpu/3" {
		t.Fatalf("NVML down: pm_counters' GPU zones %q, want gpu/2,gpu/3", got)
	}
	nv.up = true
	iv := n.GPUs.Interval(context.Background(), time.Now())
	if got := gpuZones(); got != "" {
		t.Errorf("NVML up: pm_counters still reports %q", got)
	}
	for i, d := range iv.Devices {
		if z := n.GPUZone(d.Reading.Device); z != i {
			t.Errorf("%s: zone %d, want %d", d.Reading.Device.Key(), z, i)
		}
	}
	// 20 J on accel0 while NVML reads it: the stage's, not pm_counters'.
	time.Sleep(100 * time.Millisecond)
	acc0 := filepath.Join(root, "cray", "pm_counters", "accel0_energy")
	if err := os.WriteFile(acc0, []byte("902234 J\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = gpuZones()
	nv.up = false
	_ = n.GPUs.Interval(context.Background(), time.Now())
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
	if strings.Join(got, ",") != "gpu/2 0 J,gpu/3 0 J" {
		t.Errorf("NVML down again: pm_counters' GPU zones %q, want them back without the energy NVML counted", got)
	}
}
