package discover

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

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

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

func noTools(string) (string, error) { return "", errors.New("not found") }

func zones(t *testing.T, m power.Meter) []string {
	t.Helper()
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var z []string
	for _, x := range s {
		z = append(z, x.Source+":"+x.Zone)
	}
	return z
}

// discoverAuto walks the table as Open does in auto mode, without the
// estimator fallback, and returns the combined meter and discovery lines.
func discoverAuto(t *testing.T, root string) (power.Meter, []string, error) {
	t.Helper()
	return discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond})
}

func discoverWith(t *testing.T, cfg Config) (power.Meter, []string, error) {
	t.Helper()
	f, err := walk(context.Background(), cfg.withDefaults(), zap.NewNop())
	if err != nil {
		return nil, nil, err
	}
	lines := make([]string, len(f.notes))
	for i, n := range f.notes {
		lines[i] = n.line
	}
	if !f.measured {
		for _, m := range f.meters {
			closeMeter(m)
		}
		return nil, lines, errors.New("no power meter found")
	}
	return power.Combine(f.meters...), lines, nil
}

func TestDiscoverPMCountersWins(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/pm-counters", root)
	copyTree(t, "../testdata/hwmon", root)
	m, log, err := discoverAuto(t, root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.(*power.Combined).Close()
	got := strings.Join(zones(t, m), " ")
	if got != "pm_counters:platform pm_counters:package pm_counters:dram pm_counters:gpu pm_counters:gpu" {
		t.Fatalf("zones %q\nlog:\n%s", got, strings.Join(log, "\n"))
	}
	if !strings.Contains(strings.Join(log, "\n"), "pm_counters: used for platform") {
		t.Fatalf("log:\n%s", strings.Join(log, "\n"))
	}
}

func TestDiscoverHwmonPlatform(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/hwmon", root)
	m, log, err := discoverAuto(t, root)
	if err != nil {
		t.Fatal(err)
	}
	defer m.(*power.Combined).Close()
	got := strings.Join(zones(t, m), " ")
	if got != "hwmon:platform hwmon:gpu hwmon:gpu" {
		t.Fatalf("zones %q\nlog:\n%s", got, strings.Join(log, "\n"))
	}
}

func TestDiscoverNothing(t *testing.T) {
	_, log, err := discoverAuto(t, t.TempDir())
	if err == nil || len(log) < 5 {
		t.Fatalf("err %v, log %q", err, log)
	}
}

// With the GPU stage reading one amdgpu card per device (0000:03:00.0),
// hwmon keeps the platform meter, drops that card's chip, and keeps the
// chip of a card the stage cannot read (0000:04:00.0, no DRM entry) as
// gpu socket 1, after the stage's zone; nothing counted twice, nothing
// lost.
func TestDiscoverHwmonLeavesOutTheGPUStagesDevices(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/hwmon", root)
	// hwmon2 and hwmon3 are the fixture's GPU chips; give them devices.
	for i, addr := range map[string]string{"hwmon2": "0000:03:00.0", "hwmon3": "0000:04:00.0"} {
		dev := filepath.Join(root, "devices", "pci0000:00", addr)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dev, filepath.Join(root, "class", "hwmon", i, "device")); err != nil {
			t.Fatal(err)
		}
	}
	m, log, err := discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond, GPUDevices: []string{"0000:03:00.0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.(*power.Combined).Close()
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range s {
		got = append(got, fmt.Sprintf("%s:%s/%d", z.Source, z.Zone, z.Socket))
	}
	if strings.Join(got, " ") != "hwmon:platform/-1 hwmon:gpu/1" {
		t.Fatalf("zones %q\nlog:\n%s", got, strings.Join(log, "\n"))
	}
}

// pm_counters' accelN is the Nth GPU: with the GPU stage reading one
// device, accel0 is left out and accel1 stays as gpu socket 1.
func TestDiscoverPMCountersLeavesOutTheGPUStagesDevices(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/pm-counters", root)
	m, _, err := discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond, GPUDevices: []string{"0000:3b:00.0"}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var gpus []int
	for _, z := range s {
		if z.Zone == reading.ZoneGPU {
			gpus = append(gpus, z.Socket)
		}
	}
	if fmt.Sprint(gpus) != "[1]" {
		t.Fatalf("pm_counters gpu sockets %v, want [1]", gpus)
	}
}

// An APU's amdgpu chip reports socket power, CPU included: hwmon never
// makes it a GPU zone, whether or not the GPU stage runs.
func TestDiscoverHwmonLeavesOutAPUs(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/hwmon", root)
	for i, addr := range map[string]string{"hwmon2": "0000:03:00.0", "hwmon3": "0000:c1:00.0"} {
		dev := filepath.Join(root, "devices", "pci0000:00", addr)
		if err := os.MkdirAll(dev, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dev, filepath.Join(root, "class", "hwmon", i, "device")); err != nil {
			t.Fatal(err)
		}
	}
	m, _, err := discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond, APUs: []string{"0000:c1:00.0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.(*power.Combined).Close()
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range s {
		got = append(got, fmt.Sprintf("%s/%d", z.Zone, z.Socket))
	}
	if strings.Join(got, " ") != "platform/-1 gpu/0" {
		t.Fatalf("zones %v, want the platform and the discrete card only", got)
	}
}

// The GPU stage reads NVML device 1 only (device 0's handle failed): it
// is accel1, so pm_counters leaves out accel1, not accel0, and keeps
// accel0, which nothing else reads, as gpu socket 1, after the stage's
// one zone.
func TestDiscoverPMCountersLeavesOutByAcceleratorNumber(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/pm-counters", root)
	m, _, err := discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond,
		GPUDevices: []string{"0000:3b:00.0"}, GPUAccels: []int{1}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	// 10 J on accel0 and 3 J on accel1 over 100 ms: plausible powers.
	time.Sleep(100 * time.Millisecond)
	dir := filepath.Join(root, "cray", "pm_counters")
	for f, j := range map[string]int{"accel0_energy": 902214 + 10, "accel1_energy": 899873 + 3} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(fmt.Sprintf("%d J\n", j)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := m.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, z := range s {
		if z.Zone == reading.ZoneGPU {
			got = append(got, fmt.Sprintf("gpu/%d %.0f J", z.Socket, z.Joules))
		}
	}
	if fmt.Sprint(got) != "[gpu/1 10 J]" {
		t.Fatalf("pm_counters GPU zones %v, want accel0's 10 J as gpu/1", got)
	}
}
