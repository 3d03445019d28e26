package discover

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/power"
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
	s, err := m.Read()
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

// With the GPU source reading amdgpu/i915/xe per device (gpu.sysfs on),
// hwmon keeps the platform meter and drops its two GPU chips, so no GPU
// is counted twice.
func TestDiscoverHwmonGPUsElsewhere(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/hwmon", root)
	m, log, err := discoverWith(t, Config{Source: "auto", SysfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond, GPUsElsewhere: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.(*power.Combined).Close()
	if got := strings.Join(zones(t, m), " "); got != "hwmon:platform" {
		t.Fatalf("zones %q\nlog:\n%s", got, strings.Join(log, "\n"))
	}
}
