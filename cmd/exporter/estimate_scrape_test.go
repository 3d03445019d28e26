package main

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/power"
)

// The exporter as main builds it, on this machine with
// power.source=estimator: a real scrape carries the estimate, its band and
// the info series, promlint-clean; the estimate is the zone's power of the
// interval and lies in its band; the curve is the VM one exactly when this
// machine is a VM.
func TestScrapeEstimator(t *testing.T) {
	testenv.RequireRoot(t)
	cfg := testConfig(t)
	cfg.Accounting.Mode = "procfs"
	cfg.Power.Source = "estimator"
	cfg.Power.IPMI = "off"
	cfg.Stats.Interval = time.Second
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.Web.ListenAddresses = []string{addr}
	cfg.Web.AlloyTargets = false
	cfg.GPU.NVML, cfg.GPU.Sysfs = "off", "off"
	c := newComponents(zap.NewNop())
	defer c.close()
	if err := build(cfg, c); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	defer func() { cancel(); <-done }()

	var fams map[string]*dto.MetricFamily
	var body []byte
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		f, raw := scrape(t, "http://"+addr)
		if n, _ := sum(f, "wattrace_stats_intervals_total", nil); n >= 3 {
			fams, body = f, raw
			break
		}
	}
	if fams == nil {
		t.Fatal("no third interval in 20 s")
	}
	testenv.Promlint(t, body)
	pkg := map[string]string{"zone": "package", "socket": "node", "source": "estimator", "method": "estimated"}
	est, ok1 := sum(fams, "wattrace_node_estimated_power_watts", pkg)
	lo, ok2 := sum(fams, "wattrace_node_estimated_power_lower_watts", pkg)
	hi, ok3 := sum(fams, "wattrace_node_estimated_power_upper_watts", pkg)
	pw, ok4 := sum(fams, "wattrace_node_power_watts", pkg)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		t.Fatalf("estimate families missing: %v %v %v %v", ok1, ok2, ok3, ok4)
	}
	t.Logf("package: %.2f W in [%.2f, %.2f] W; zone power %.2f W", est, lo, hi, pw)
	if !(lo < est && est < hi) || est <= 0 {
		t.Errorf("estimate %v not inside its band [%v, %v]", est, lo, hi)
	}
	// One Advance per interval: the zone's mean power of the interval is
	// the curve at that interval's utilization, which is the estimate.
	if math.Abs(pw-est) > 1e-6*est {
		t.Errorf("zone power %v W, estimate %v W: want the same", pw, est)
	}
	vm, _ := power.Virtualized("/proc", "/sys")
	want := "package"
	if vm {
		want = "vm"
	}
	if n, ok := sum(fams, "wattrace_node_estimator_info", map[string]string{"zone": "package", "curve": want}); !ok || n != 1 {
		t.Errorf("no wattrace_node_estimator_info{zone=package,curve=%s} (vm %v)", want, vm)
	}
	_, platform := sum(fams, "wattrace_node_estimator_info", map[string]string{"zone": "platform", "curve": "server"})
	if platform == vm {
		t.Errorf("platform server curve present %v on a machine with vm=%v", platform, vm)
	}
}
