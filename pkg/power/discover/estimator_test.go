package discover

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/reading"
)

// nodeTree writes the files the estimator reads: cpuinfo (model name and
// flags), meminfo, the online CPUs and each CPU's package id.
func nodeTree(t *testing.T, model, flags string, sockets, threads int, memKB uint64) string {
	t.Helper()
	root := t.TempDir()
	var cpuinfo strings.Builder
	for i := 0; i < threads; i++ {
		fmt.Fprintf(&cpuinfo, "processor\t: %d\nmodel name\t: %s\nflags\t\t: %s\n\n", i, model, flags)
		dir := filepath.Join(root, "devices", "system", "cpu", fmt.Sprintf("cpu%d", i), "topology")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "physical_package_id"), []byte(fmt.Sprint(i*sockets/threads, "\n")), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{
		"cpuinfo":                   cpuinfo.String(),
		"meminfo":                   fmt.Sprintf("MemTotal:       %d kB\nMemFree:        1000 kB\n", memKB),
		"devices/system/cpu/online": fmt.Sprintf("0-%d\n", threads-1),
	} {
		if err := os.WriteFile(filepath.Join(root, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// readJoules reads the meter once, each node-wide zone's energy by name.
func readJoules(t *testing.T, e *power.Estimator) map[string]float64 {
	t.Helper()
	samples, err := e.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, s := range samples {
		if s.Socket != -1 {
			t.Errorf("zone %s on socket %d, want node-wide (-1)", s.Zone, s.Socket)
		}
		out[s.Zone] = s.Joules
	}
	return out
}

func openEstimatorOn(t *testing.T, cfg Config) *power.Estimator {
	t.Helper()
	cfg.Source = "estimator"
	m, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	e, ok := m.(*power.Estimator)
	if !ok {
		t.Fatalf("meter %T, want *power.Estimator", m)
	}
	return e
}

// A bare-metal node without a meter: the package zone from TDP × Teads'
// curve (capped at the server) and the platform zone from the SPECpower
// fit, both for what the node's files say it is.
func TestEstimatorBareMetal(t *testing.T) {
	const model = "Intel(R) Xeon(R) Gold 6252 CPU @ 2.10GHz"
	root := nodeTree(t, model, "fpu vme sse2 avx2", 2, 96, 384<<20)
	e := openEstimatorOn(t, fastConfig(root))
	zs := e.Zones()
	if len(zs) != 2 || zs[0].Zone != reading.ZonePackage || zs[1].Zone != reading.ZonePlatform {
		t.Fatalf("zones %+v, want package and platform", zs)
	}
	m, err := curves.Default()
	if err != nil {
		t.Fatal(err)
	}
	node := curves.Node{CPU: model, Sockets: 2, Threads: 96, MemoryGiB: 384}
	server, _ := m.Server(node)
	pkg, _ := m.Package(node)
	pkg = curves.CapAt(pkg, server)
	if zs[1].Curve.Points != server.Points || zs[0].Curve.Points != pkg.Points {
		t.Errorf("curves differ from the model's for %+v", node)
	}
	if w, _ := e.IdleWatts(reading.ZonePlatform); w != server.Points[0].Watts || w < 50 || w > 500 {
		t.Errorf("platform idle %v W, want the model's %v", w, server.Points[0].Watts)
	}
	// Read gives each zone the model's curve integrated over what was
	// advanced: 30 s at half load, from the model's figures, not the
	// estimator's own.
	e.Advance(0.5, 30*time.Second)
	got := readJoules(t, e)
	wantPkg, wantServer := 30*pkg.At(0.5).Watts, 30*server.At(0.5).Watts
	if len(got) != 2 || math.Abs(got[reading.ZonePackage]-wantPkg) > 1e-9 || math.Abs(got[reading.ZonePlatform]-wantServer) > 1e-9 {
		t.Errorf("read %v J after 30 s at half load, want package %.3f J and platform %.3f J", got, wantPkg, wantServer)
	}
	if !(wantPkg > 0 && wantPkg < wantServer) {
		t.Errorf("package %.3f J, platform %.3f J: the package is part of the platform", wantPkg, wantServer)
	}
	est := e.Estimates()
	if est[1].Curve != "server" || est[1].Tier != curves.TierCPU || est[1].Arch != "Cascade Lake" || est[0].Curve != "package" {
		t.Errorf("estimates %+v", est)
	}
}

// A VM: one package zone of its vCPUs at CCF's figures for the host's
// microarchitecture (EPYC 3rd Gen: 0.46 W idle per vCPU).
func TestEstimatorVM(t *testing.T) {
	root := nodeTree(t, "AMD EPYC 7B13", "fpu sse2 hypervisor avx2", 1, 4, 16<<20)
	e := openEstimatorOn(t, fastConfig(root))
	zs := e.Zones()
	if len(zs) != 1 || zs[0].Zone != reading.ZonePackage || zs[0].Curve.Info.Kind != curves.KindVM || zs[0].Curve.Info.Arch != "EPYC 3rd Gen" {
		t.Fatalf("zones %+v, want one vm package zone", zs)
	}
	if w, _ := e.IdleWatts(reading.ZonePackage); math.Abs(w-4*0.46) > 1e-9 {
		t.Errorf("idle %v W, want 4 x 0.46", w)
	}
	if full := zs[0].Curve.Points[curves.NumLevels-1]; math.Abs(full.Watts-4*1.96) > 1e-9 || !(full.Lower < full.Watts && full.Watts < full.Upper) {
		t.Errorf("full load %+v, want 4 x 1.96 W inside a band", full)
	}
	// What the meter reads is that curve integrated: 10 s idle and 10 s
	// with every vCPU busy are 4 × (0.46 + 1.96) W × 10 s = 96.8 J.
	e.Advance(0, 10*time.Second)
	e.Advance(1, 10*time.Second)
	if got := readJoules(t, e); len(got) != 1 || math.Abs(got[reading.ZonePackage]-96.8) > 1e-9 {
		t.Errorf("read %v J after 10 s idle and 10 s busy, want package 96.8 J", got)
	}

	// Operator figures replace CCF's; the one not set comes from the table.
	cfg := fastConfig(root)
	cfg.MaxWattsPerCPU = 5
	e = openEstimatorOn(t, cfg)
	c := e.Zones()[0].Curve
	if c.Points[0].Watts != 4*0.46 || c.Points[curves.NumLevels-1].Watts != 20 || c.Info.Tier != "configuration" {
		t.Errorf("with max 5 W per CPU: idle %v, full %v, tier %q", c.Points[0].Watts, c.Points[curves.NumLevels-1].Watts, c.Info.Tier)
	}
	cfg = fastConfig(root)
	cfg.MinWattsPerCPU = 3 // above the table's 1.96 W at full load
	if _, err := Open(context.Background(), cfg, nil); err == nil || !strings.Contains(err.Error(), "power.estimator.max-watts-per-cpu") {
		t.Errorf("min above the table's max: %v", err)
	}
}

// Nothing readable (no cpuinfo, meminfo or topology): the generic curves,
// and still a working estimator.
func TestEstimatorKnowsNothing(t *testing.T) {
	e := openEstimatorOn(t, fastConfig(t.TempDir()))
	for _, z := range e.Zones() {
		if z.Curve.Info.Tier != curves.TierGeneric || len(z.Curve.Info.Fallbacks) == 0 {
			t.Errorf("zone %s: tier %q fallbacks %q", z.Zone, z.Curve.Info.Tier, z.Curve.Info.Fallbacks)
		}
	}
}

// A configured meter retried in the background owns the platform: the
// estimator then models the CPU package only.
func TestEstimatorLeavesPlatformToRetriedMeter(t *testing.T) {
	b := newBMC(t)
	b.down.Store(true)
	cfg := fastConfig(nodeTree(t, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "fpu", 2, 8, 64<<20))
	cfg = withRow(cfg, "redfish", b.config(t))
	m, err := Open(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer closeMeter(m)
	for _, z := range zones(t, m) {
		if z == ":platform" || z == "estimator:platform" {
			t.Errorf("zones %v: the estimator took the platform", zones(t, m))
		}
	}
	c := m.(*power.Combined)
	e := c.Meters()[0].(*power.Estimator)
	if zs := e.Zones(); len(zs) != 1 || zs[0].Zone != reading.ZonePackage {
		t.Errorf("estimator zones %+v, want package only", zs)
	}
	// The combined meter passes the estimator's estimates on.
	if est := c.Estimates(); len(est) != 1 || est[0].Name != reading.ZonePackage || est[0].Source != "estimator" || est[0].Curve != curves.KindPackage {
		t.Errorf("combined estimates %+v", est)
	}
}

// procStat writes root/stat with the given steal, in USER_HZ ticks.
func procStat(t *testing.T, root string, stealTicks int) {
	t.Helper()
	line := fmt.Sprintf("cpu  1000 0 500 90000 0 0 0 %d 0 0\n", stealTicks)
	body := line + "intr 0\nctxt 0\nbtime 0\nprocesses 1\nprocs_running 1\nprocs_blocked 0\n"
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// docs/vm.md's worked example of the estimate under steal, from fixture
// /proc/stat trees: a 4-vCPU guest of a Cascade Lake host (CCF: 0.69 W
// per vCPU idle, 4.06 W at full load), busy 14 of its 40 vCPU-seconds in
// 10 s while 12 are stolen (1200 ticks, 30%). Its load is 14/28 = 50%
// (9.3078 W on the curve); its power 2.76 + 0.7 × (9.3078 − 2.76) =
// 7.3435 W, 73.43 J; the band 5.91 to 11.77 W. Ignoring steal the curve at
// 35% gave 77.76 J in a band 6.49 to 9.65 W.
func TestEstimatorVMSteal(t *testing.T) {
	root := nodeTree(t, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", "fpu sse2 hypervisor avx2", 1, 4, 16<<20)
	procStat(t, root, 5000)
	e := openEstimatorOn(t, fastConfig(root))
	c := e.Zones()[0].Curve
	if c.Info.Kind != curves.KindVM || c.Info.Arch != "Cascade Lake" {
		t.Fatalf("curve %+v, want the VM curve of Cascade Lake", c.Info)
	}
	e.Advance(0, 0) // the stats loop's baseline
	procStat(t, root, 5000+1200)
	e.Advance(0.35, 10*time.Second)

	idle, half := c.Points[0], c.Points[5]
	want := curves.Estimate{Watts: idle.Watts + 0.7*(half.Watts-idle.Watts), Lower: idle.Lower + 0.7*(half.Lower-idle.Lower), Upper: half.Upper}
	got := readJoules(t, e)[reading.ZonePackage]
	if math.Abs(got-10*want.Watts) > 1e-9 {
		t.Errorf("30%% stolen: %.6f J, want %.6f J", got, 10*want.Watts)
	}
	// The figures docs/vm.md prints (they follow fit.json's shape and
	// band: rerun and update the docs when the fit changes).
	est := e.Estimates()[0]
	for _, c := range []struct {
		name      string
		got, want float64
	}{{"idle W", idle.Watts, 2.76}, {"W at 50%", half.Watts, 9.3078}, {"joules", got, 73.43}, {"lower W", est.LowerW, 5.91}, {"upper W", est.UpperW, 11.77},
		{"joules ignoring steal", 10 * c.At(0.35).Watts, 77.76}, {"lower W ignoring steal", c.At(0.35).Lower, 6.49}, {"upper W ignoring steal", c.At(0.35).Upper, 9.65}} {
		if math.Abs(c.got-c.want) > 0.005 {
			t.Errorf("%s: %.4f, docs/vm.md says %.4f", c.name, c.got, c.want)
		}
	}
	if math.Abs(est.Watts-want.Watts) > 1e-9 || math.Abs(est.LowerW-want.Lower) > 1e-9 || math.Abs(est.UpperW-want.Upper) > 1e-9 {
		t.Errorf("estimate %+v, want %+v", est, want)
	}
}
