package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
)

// amdFixture is a sysfs tree with one amdgpu card (0000:03:00.0, hwmon
// power1_average in µW) and a procfs tree whose DRM clients are the given
// real PIDs: the GPU source is the real one, only the hardware is a file.
type amdFixture struct {
	t         *testing.T
	sys, proc string
	hwmon     string
	fdinfo    map[int]string
}

func newAMDFixture(t *testing.T, watts int, pids ...int) *amdFixture {
	root := t.TempDir()
	f := &amdFixture{t: t, sys: filepath.Join(root, "sys"), proc: filepath.Join(root, "proc"), fdinfo: map[int]string{}}
	dev := filepath.Join(f.sys, "devices", "pci0000:00", "0000:03:00.0")
	drv := filepath.Join(f.sys, "bus", "pci", "drivers", "amdgpu")
	f.mkdir(drv)
	f.write(filepath.Join(dev, "device"), "0x744c\n")
	f.link(drv, filepath.Join(dev, "driver"))
	f.hwmon = filepath.Join(dev, "hwmon", "hwmon2")
	f.write(filepath.Join(f.hwmon, "name"), "amdgpu\n")
	f.setWatts(watts)
	f.link(dev, filepath.Join(f.sys, "class", "drm", "card0", "device"))
	for _, pid := range pids {
		f.link("/dev/dri/renderD128", filepath.Join(f.proc, fmt.Sprint(pid), "fd", "5"))
		f.fdinfo[pid] = filepath.Join(f.proc, fmt.Sprint(pid), "fdinfo", "5")
		f.busy(pid, 0)
	}
	return f
}

func (f *amdFixture) mkdir(p string) {
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
}

// write replaces p whole (a temporary file renamed over it), as the
// kernel's sysfs and fdinfo files read whole: an in-place rewrite lets the
// source read a truncated fdinfo now and then, which under load once
// turned the 3:1 split into 0.94:1.
func (f *amdFixture) write(p, s string) {
	if err := f.tryWrite(p, s); err != nil {
		f.t.Fatal(err)
	}
}

// tryWrite is write for other goroutines than the test's: it returns the
// error.
func (f *amdFixture) tryWrite(p, s string) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.sys), "write-")
	if err == nil {
		_, err = tmp.WriteString(s)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	return err
}

func (f *amdFixture) link(target, p string) {
	f.mkdir(filepath.Dir(p))
	if err := os.Symlink(target, p); err != nil {
		f.t.Fatal(err)
	}
}

func (f *amdFixture) setWatts(w int) {
	f.write(filepath.Join(f.hwmon, "power1_average"), fmt.Sprintf("%d\n", w*1_000_000))
}

// busy sets the client's cumulative gfx busy time.
func (f *amdFixture) busy(pid int, ns uint64) {
	if err := f.tryBusy(pid, ns); err != nil {
		f.t.Fatal(err)
	}
}

func (f *amdFixture) tryBusy(pid int, ns uint64) error {
	return f.tryWrite(f.fdinfo[pid], fmt.Sprintf("pos:\t0\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t%d\ndrm-engine-gfx:\t%d ns\n", pid, ns))
}

// gate makes the fixture step in lockstep with the GPU source's scans: a
// DRM client of PID 1 (its /proc name sorts before every other PID's, so
// each scan reads it first) whose fdinfo is a FIFO. Each time a scan opens
// it, step runs, the scan waiting, before the FIFO answers (not a DRM
// client's fdinfo, so nothing is credited to it); the clients' files the
// scan reads next are then all of one step, never half-written, however
// late the scan or the test runs. step runs on the gate's goroutine. The
// gate ends in the test's cleanup, once the exporter no longer runs.
func (f *amdFixture) gate(step func()) {
	f.link("/dev/dri/renderD128", filepath.Join(f.proc, "1", "fd", "5"))
	fifo := filepath.Join(f.proc, "1", "fdinfo", "5")
	f.mkdir(filepath.Dir(fifo))
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		f.t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	stopped := func() bool {
		select {
		case <-quit:
			return true
		default:
			return false
		}
	}
	go func() {
		defer close(done)
		for !stopped() {
			w, err := unix.Open(fifo, unix.O_WRONLY|unix.O_CLOEXEC, 0) // until a scan opens it
			if err != nil {
				return
			}
			if !stopped() {
				step()
				_, _ = unix.Write(w, []byte("pos:\t0\nflags:\t02\n"))
			}
			// Hold the FIFO open until the scan has closed its end
			// (POLLERR on ours), so that the next open waits for the
			// next scan rather than finding this one still reading.
			for !stopped() {
				pfd := []unix.PollFd{{Fd: int32(w), Events: 0}}
				if n, err := unix.Poll(pfd, 100); (err != nil && err != unix.EINTR) || (n > 0 && pfd[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0) {
					break
				}
			}
			unix.Close(w)
		}
	}()
	f.t.Cleanup(func() {
		close(quit)
		// Stand in for a scan, so that a gate waiting for one returns.
		if r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			defer r.Close()
		}
		<-done
	})
}

// The exporter built as main builds it (build: procfs accounting, the
// estimator, the stats loop, the collectors, the HTTP server), with the
// GPU source pointed at an amdgpu fixture whose two DRM clients are real
// processes: a real scrape passes promlint and carries every wattrace_gpu_
// family of the golden list, with the documented labels; the processes'
// GPU energy splits 3:1 by their engine time and, with the GPU's idle,
// adds up to the GPU's energy.
func TestScrapeWithGPUFixture(t *testing.T) {
	testenv.RequireRoot(t)
	a := exec.Command("sleep", "60")
	b := exec.Command("sleep", "60")
	for _, c := range []*exec.Cmd{a, b} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testenv.Kill(c) })
	}
	fx := newAMDFixture(t, 200, a.Process.Pid, b.Process.Pid)
	cfg := testConfig(t)
	cfg.Accounting.Mode = "procfs"
	cfg.Power.Source = "estimator"
	cfg.Power.IPMI = "off"
	cfg.Stats.Interval = time.Second
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.Web.ListenAddresses = []string{addr}
	cfg.Web.AlloyTargets = false
	cfg.GPU.NVML = "off"
	cfg.GPU.SysfsRoot, cfg.GPU.ProcfsRoot = fx.sys, fx.proc
	cfg.GPU.IdleWatts = map[string]float64{"0": 20}
	c := newComponents(zap.NewNop())
	defer c.close()
	if err := build(cfg, c); err != nil {
		t.Fatal(err)
	}
	// The clients' busy time grows 3:1 from each scan of the GPU source
	// to the next: 300 µs and 100 µs, well below the interval, whatever
	// the interval the exporter's loop actually ran.
	var steps uint64
	fx.gate(func() {
		steps++
		for _, err := range []error{fx.tryBusy(a.Process.Pid, steps*300_000), fx.tryBusy(b.Process.Pid, steps*100_000)} {
			if err != nil {
				t.Error(err)
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.run(ctx) }()
	defer func() { cancel(); <-done }()

	url := "http://" + addr
	var fams map[string]*dto.MetricFamily
	var body []byte
	// A minute: under heavy load four 1 s intervals have taken 19 s.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		f, raw := scrape(t, url)
		if n, _ := sum(f, "wattrace_stats_intervals_total", nil); n >= 4 {
			fams, body = f, raw
			break
		}
	}
	if fams == nil {
		t.Fatal("no fourth interval in a minute")
	}
	testenv.Promlint(t, body)
	for _, fam := range []string{"wattrace_gpu_energy_joules_total", "wattrace_gpu_power_watts", "wattrace_gpu_utilization_ratio",
		"wattrace_gpu_unattributed_joules_total", "wattrace_gpu_process_energy_joules_total"} {
		if fams[fam] == nil {
			t.Errorf("%s missing", fam)
		}
	}
	gpu := map[string]string{"gpu": "0", "uuid": "0000:03:00.0", "source": "sysfs", "method": "power_integrated"}
	idle, _ := sum(fams, "wattrace_gpu_energy_joules_total", with(gpu, "mode", "idle"))
	dyn, _ := sum(fams, "wattrace_gpu_energy_joules_total", with(gpu, "mode", "dynamic"))
	pa, _ := sum(fams, "wattrace_gpu_process_energy_joules_total", map[string]string{"pid": fmt.Sprint(a.Process.Pid), "comm": "sleep", "gpu": "0", "basis": "engine_time"})
	pb, _ := sum(fams, "wattrace_gpu_process_energy_joules_total", map[string]string{"pid": fmt.Sprint(b.Process.Pid), "gpu": "0"})
	un, _ := sum(fams, "wattrace_gpu_unattributed_joules_total", gpu)
	t.Logf("GPU idle %.3f J, dynamic %.3f J; pids %.3f J and %.3f J, unattributed %.3f J", idle, dyn, pa, pb, un)
	if idle <= 0 || dyn <= 0 || pa <= 0 || pb <= 0 {
		t.Fatalf("idle %v dynamic %v processes %v %v", idle, dyn, pa, pb)
	}
	// 200 W, 20 W of it idle: dynamic is 9 × idle; the processes and the
	// unattributed part make up the dynamic energy exactly (the scrape
	// prints 17 significant digits), and, every scan having read the
	// clients' busy times 3:1, split 3:1 exactly.
	if math.Abs(dyn/idle-9) > 1e-6 || math.Abs(pa+pb+un-dyn) > 1e-9*dyn {
		t.Errorf("idle %v dynamic %v processes %v + %v unattributed %v", idle, dyn, pa, pb, un)
	}
	if r := pa / pb; math.Abs(r-3) > 1e-9 || un != 0 {
		t.Errorf("split %v : %v = %v, unattributed %v: want 3 and none", pa, pb, r, un)
	}
	// The GPU zone reaches the node families as gpu / socket 0.
	if v, ok := sum(fams, "wattrace_node_energy_joules_total", map[string]string{"zone": "gpu", "socket": "0"}); !ok || math.Abs(v-idle-dyn) > 1e-9*v {
		t.Errorf("node gpu zone %v (%v), want %v", v, ok, idle+dyn)
	}
	// The GPU source's health joins the meters'.
	if v, ok := sum(fams, "wattrace_source_up", map[string]string{"source": "gpu-sysfs/0000:03:00.0"}); !ok || v != 1 {
		t.Errorf("no GPU source health in wattrace_source_up (%v, %v)", v, ok)
	}
	for _, fam := range []string{"wattrace_gpu_allocation_info{", "wattrace_gpu_allocation_idle_ratio{", "wattrace_gpu_allocation_idle_seconds_total{"} {
		if strings.Contains(string(body), fam) {
			t.Errorf("%s series without an allocation source", fam)
		}
	}
}

func with(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for a, b := range m {
		out[a] = b
	}
	return out
}

// A Cray node's pm_counters with accel0
// and accel1 plus one DRM card the GPU stage reads. The card is accel0:
// its energy reaches the node and the workloads once, as the stage's
// zone gpu/0 (source sysfs), and pm_counters keeps only accel1, a GPU
// the stage cannot read, as gpu/1; no zone identity is shared.
func TestPMCountersAccelAndDRMCardCountedOnce(t *testing.T) {
	testenv.RequireRoot(t)
	fx := newAMDFixture(t, 200)
	if out, err := exec.Command("cp", "-r", "../../pkg/power/testdata/pm-counters/cray", fx.sys).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	cfg := testConfig(t)
	cfg.Accounting.Mode = "procfs"
	cfg.Path.Sysfs = fx.sys
	cfg.Power.Source = "auto"
	cfg.Power.IPMI = "off"
	cfg.Stats.Interval = time.Second
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cfg.Web.ListenAddresses = []string{addr}
	cfg.Web.AlloyTargets = false
	cfg.GPU.NVML = "off"
	cfg.GPU.SysfsRoot, cfg.GPU.ProcfsRoot = fx.sys, fx.proc
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
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		f, _ := scrape(t, "http://"+addr)
		if n, _ := sum(f, "wattrace_stats_intervals_total", nil); n >= 2 {
			fams = f
			break
		}
	}
	if fams == nil {
		t.Fatal("no second interval in 20 s")
	}
	gpuZones := map[string]string{}
	for _, m := range fams["wattrace_node_energy_joules_total"].GetMetric() {
		l := map[string]string{}
		for _, p := range m.GetLabel() {
			l[p.GetName()] = p.GetValue()
		}
		if l["zone"] != "gpu" {
			continue
		}
		if src, dup := gpuZones[l["socket"]]; dup && src != l["source"] {
			t.Errorf("zone gpu/%s from %s and %s", l["socket"], src, l["source"])
		}
		gpuZones[l["socket"]] = l["source"]
	}
	if fmt.Sprint(gpuZones) != "map[0:sysfs 1:pm_counters]" {
		t.Errorf("gpu zones by socket %v, want 0 from sysfs (the card) and 1 from pm_counters (accel1)", gpuZones)
	}
}
