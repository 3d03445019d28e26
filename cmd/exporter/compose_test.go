package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
	"github.com/wattrace/wattrace/internal/measure"
	"github.com/wattrace/wattrace/internal/testenv"
)

// composeFixture is a node this machine is not: RAPL (one socket), a
// power_meter hwmon chip for the platform, a discrete amdgpu card
// (0000:03:00.0, card0) drawing gpuWatts with its hwmon chip, an AMD APU
// (0000:c1:00.0, card1, a KFD node with CPU cores) whose amdgpu chip
// reports the whole socket, and, with pm, Cray pm_counters whose accel0
// and accel1 zones are the node's two accelerators.
func composeFixture(t *testing.T, gpuWatts int, pm bool) string {
	tr := sysfstest.NewTree(t)
	copyDir(t, "../../pkg/power/testdata/rapl-1socket", tr.Sys)
	copyDir(t, "../../pkg/power/testdata/hwmon/class/hwmon/hwmon0", filepath.Join(tr.Sys, "class", "hwmon", "hwmon0"))
	if pm {
		copyDir(t, "../../pkg/power/testdata/pm-counters", tr.Sys)
	}
	for n, c := range []struct {
		addr  string
		watts int
	}{{"0000:03:00.0", gpuWatts}, {"0000:c1:00.0", 35}} {
		hw := tr.Card(n, c.addr, "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": fmt.Sprintf("%d\n", c.watts*1_000_000)})
		tr.Link(filepath.Dir(filepath.Dir(hw)), filepath.Join(hw, "device"))
		tr.Link(hw, filepath.Join(tr.Sys, "class", "hwmon", filepath.Base(hw)))
	}
	tr.KFDNode(1, "0000:03:00.0", 1111, 0, 64)
	tr.KFDNode(2, "0000:c1:00.0", 2222, 16, 32)
	return tr.Sys
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, strings.ReplaceAll(rel, "%3A", ":")), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, strings.ReplaceAll(rel, "%3A", ":")), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// exporterZones runs the exporter's parts, from the cgroup hierarchy to
// the stats loop, on sys, and returns the first snapshot's zones that
// hold the GPU stage's zones, as "name/socket source".
func exporterZones(t *testing.T, sys string) []string {
	cfg := testConfig(t)
	cfg.Path.Sysfs = sys
	cfg.Accounting.Mode = "procfs"
	cfg.Power.IPMI = "off"
	cfg.Power.HostShare = ""
	cfg.Stats.Interval = time.Second
	cfg.GPU.NVML = "off"
	cfg.GPU.SysfsRoot = sys
	c := newComponents(zap.NewNop())
	defer c.close()
	st := &state{}
	if err := openParts(cfg, st, c, []part{{"cgroup hierarchy", openHierarchy}, {"node", readNode},
		{"accounting", openAccountingPart}, {"GPUs and meters", openSourcesPart}, {"stats loop", openLoop}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		s := st.loop.Snapshot()
		if s == nil {
			continue
		}
		var out []string
		gpu := false
		for _, z := range s.Zones {
			out = append(out, fmt.Sprintf("%s/%d %s", z.Name, z.Socket, z.Source))
			gpu = gpu || z.Source == "sysfs"
		}
		if gpu {
			sort.Strings(out)
			return out
		}
	}
	t.Fatal("no snapshot with the GPU stage's zone in 15 s")
	return nil
}

// measureZones runs `wattrace measure` on sys over `sleep 1` and returns
// its zones as "name/socket source" and the run's record.
func measureZones(t *testing.T, sys string) ([]string, measure.Run) {
	out := filepath.Join(t.TempDir(), "r.json")
	var stdout, stderr strings.Builder
	args := []string{"--json", "-o", out, "--path.sysfs", sys, "--cgroup=none", "--accounting=rusage", "--", "sleep", "1"}
	if code := measure.Main(context.Background(), args, strings.NewReader(""), &stdout, &stderr, []string{"measure"}); code != 0 {
		t.Fatalf("measure: status %d: %s", code, stderr.String())
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep measure.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	r := rep.Runs[0]
	var zs []string
	for _, z := range r.Zones {
		zs = append(zs, fmt.Sprintf("%s/%d %s", z.Zone, z.Socket, z.Source))
	}
	sort.Strings(zs)
	return zs, r
}

// The exporter and measure open the node's sources through one
// composition: given the same node they read the same zones, each device
// once. The discrete card is the GPU stage's gpu/0 (never hwmon's too,
// nor pm_counters' accel0), the APU's socket sensor is no GPU, and
// pm_counters' accel1, a device the stage cannot read, stays as gpu/1.
// The card draws 150 W, so its zone's energy is 150 W × the run, not
// twice that.
func TestExporterAndMeasureShareTheComposition(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		pm   bool
		want string
	}{
		{"rapl+hwmon", false, "core/0 rapl|gpu/0 sysfs|package/0 rapl|platform/-1 hwmon|uncore/0 rapl"},
		{"rapl+pm_counters+hwmon", true, "core/0 rapl|dram/-1 pm_counters|gpu/0 sysfs|gpu/1 pm_counters|package/0 rapl|platform/-1 pm_counters|uncore/0 rapl"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sys := composeFixture(t, 150, tc.pm)
			exp := exporterZones(t, sys)
			got, run := measureZones(t, sys)
			if strings.Join(exp, "|") != strings.Join(got, "|") {
				t.Errorf("zones differ:\nexporter %q\nmeasure  %q", exp, got)
			}
			if strings.Join(got, "|") != tc.want {
				t.Errorf("measure's zones %q, want %q", got, tc.want)
			}
			seen := map[string]bool{}
			for _, z := range run.Zones {
				k := fmt.Sprintf("%s/%d", z.Zone, z.Socket)
				if seen[k] {
					t.Errorf("zone %s twice", k)
				}
				seen[k] = true
				if z.Zone == "gpu" && z.Source == "sysfs" {
					if w := z.NodeJ / run.WallSeconds; math.Abs(w-150) > 15 {
						t.Errorf("card: %.3f J over %.3f s = %.1f W, want 150 W", z.NodeJ, run.WallSeconds, w)
					}
				}
			}
		})
	}
}
