package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// buildExporter builds the real binary once per test.
func buildExporter(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "wattrace")
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = "/usr/local/go/bin/go"
	}
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// startExporter runs the binary with args and returns its base URL; the
// process is stopped with SIGTERM when the test ends and must exit cleanly.
func startExporter(t *testing.T, bin, addr string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		held := heldPrograms(t, cmd.Process.Pid)
		t.Logf("exporter held %d BPF programs at shutdown", len(held))
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("exporter exited with %v\n%s", err, logs.String())
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("exporter did not stop on SIGINT\n%s", logs.String())
		}
		// The kernel frees a closed program from deferred work, so
		// its id can outlive the process by a moment.
		n := stillLoaded(held)
		for deadline := time.Now().Add(3 * time.Second); n != 0 && time.Now().Before(deadline); n = stillLoaded(held) {
			time.Sleep(50 * time.Millisecond)
		}
		if n != 0 {
			t.Errorf("%d of wattrace's BPF programs still loaded 3 s after shutdown", n)
		}
		if t.Failed() {
			t.Logf("exporter log:\n%s", logs.String())
		}
	})
	return "http://" + addr
}

// heldPrograms lists the BPF programs process pid holds, by program or link
// file descriptor (its fdinfo names the program). Counting by holder, not by
// name, keeps other processes' programs (a test in another package loading
// the same objects) out of the count.
func heldPrograms(t *testing.T, pid int) map[ebpf.ProgramID]bool {
	t.Helper()
	held := map[ebpf.ProgramID]bool{}
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "prog_id:"); ok {
				if id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					held[ebpf.ProgramID(id)] = true
				}
			}
		}
	}
	return held
}

// stillLoaded counts the programs of ids the kernel still has.
func stillLoaded(ids map[ebpf.ProgramID]bool) int {
	n := 0
	for id := range ids {
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			p.Close()
			n++
		}
	}
	return n
}

func scrape(t *testing.T, url string) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v", err)
	}
	return fams, body
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// sum adds the samples of a family whose labels match.
func sum(fams map[string]*dto.MetricFamily, name string, match map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var v float64
	found := false
next:
	for _, m := range f.GetMetric() {
		for k, want := range match {
			if label(m, k) != want {
				continue next
			}
		}
		found = true
		v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
	}
	return v, found
}

// The README's run command, with no flag, on this machine: within 10 s
// /metrics shows estimated node energy and per-cgroup energy that grow from
// scrape to scrape, a busy cgroup gaining more than an idle one, in BPF mode,
// and per-process energy for at most the top 20 processes.
func TestREADMERunCommand(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	busy := testenv.Cgroup(t, h.Mount, "busy")
	idle := testenv.Cgroup(t, h.Mount, "idle")
	testenv.StartIn(t, busy, testenv.Busy...)
	testenv.StartIn(t, idle, "sleep", "600")
	busyPath, idlePath := "/"+filepath.Base(busy), "/"+filepath.Base(idle)

	bin := buildExporter(t)
	start := time.Now()
	url := startExporter(t, bin, "localhost:9841")
	cgEnergy := func(fams map[string]*dto.MetricFamily, path string) float64 {
		v, _ := sum(fams, "wattrace_cgroup_energy_joules_total", map[string]string{"cgroup": path})
		return v
	}
	var first map[string]*dto.MetricFamily
	for time.Since(start) < 10*time.Second {
		fams, _ := scrape(t, url)
		if v, ok := sum(fams, "wattrace_node_energy_joules_total", map[string]string{"method": "estimated"}); ok && v > 0 && cgEnergy(fams, busyPath) > 0 {
			first = fams
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if first == nil {
		t.Fatalf("no estimated node energy and busy-cgroup energy within 10 s")
	}
	t.Logf("energy visible after %v", time.Since(start).Round(time.Millisecond))
	if v, _ := sum(first, "wattrace_accounting_mode", map[string]string{"mode": "bpf"}); v != 1 {
		t.Errorf("accounting mode is not bpf")
	}
	n0, _ := sum(first, "wattrace_stats_intervals_total", nil)
	var second map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		fams, _ := scrape(t, url)
		if n, _ := sum(fams, "wattrace_stats_intervals_total", nil); n > n0 {
			second = fams
			break
		}
	}
	if second == nil {
		t.Fatal("no new interval within 15 s")
	}
	node0, _ := sum(first, "wattrace_node_energy_joules_total", nil)
	node1, _ := sum(second, "wattrace_node_energy_joules_total", nil)
	dBusy := cgEnergy(second, busyPath) - cgEnergy(first, busyPath)
	dIdle := cgEnergy(second, idlePath) - cgEnergy(first, idlePath)
	t.Logf("node +%.2f J, busy cgroup +%.3f J, idle cgroup +%.6f J", node1-node0, dBusy, dIdle)
	if node1 <= node0 {
		t.Errorf("node energy did not grow: %v then %v", node0, node1)
	}
	if dBusy <= 0 || dBusy <= dIdle {
		t.Errorf("busy cgroup gained %v J, idle %v J: want busy > idle and > 0", dBusy, dIdle)
	}
	// Emissions are on by default with the constant provider: the busy
	// cgroup's grams grow with its energy, and every counter is its
	// joules × 436 g/kWh, interval by interval, hence in total.
	const gPerJ = 436 / 3.6e6
	if v, _ := sum(second, "wattrace_emissions_factor_grams_per_kwh", map[string]string{"provider": "constant", "grid_zone": "world"}); v != 436 {
		t.Errorf("constant factor %v g/kWh, want 436", v)
	}
	cgGrams := func(fams map[string]*dto.MetricFamily, path string) float64 {
		v, _ := sum(fams, "wattrace_cgroup_emissions_grams_total", map[string]string{"cgroup": path, "provider": "constant"})
		return v
	}
	gBusy := cgGrams(second, busyPath) - cgGrams(first, busyPath)
	t.Logf("busy cgroup +%.9f g CO2e", gBusy)
	if gBusy <= 0 || math.Abs(gBusy-dBusy*gPerJ) > 1e-9*dBusy*gPerJ+1e-15 {
		t.Errorf("busy cgroup gained %v g for %v J: want %v g", gBusy, dBusy, dBusy*gPerJ)
	}
	for _, pair := range [][2]string{{"wattrace_node_emissions_grams_total", "wattrace_node_energy_joules_total"},
		{"wattrace_cgroup_emissions_grams_total", "wattrace_cgroup_energy_joules_total"}} {
		g, _ := sum(second, pair[0], nil)
		j, _ := sum(second, pair[1], nil)
		if g <= 0 || math.Abs(g-j*gPerJ) > 1e-9*j*gPerJ {
			t.Errorf("%s = %v, want %s × 436/3.6e6 = %v", pair[0], g, pair[1], j*gPerJ)
		}
	}
	// The process collector is on by default, bounded to the top 20: the
	// busy loop is among them.
	procs := second["wattrace_process_energy_joules_total"].GetMetric()
	busyProc := false
	for _, m := range procs {
		for _, l := range m.GetLabel() {
			if l.GetName() == "cgroup" && l.GetValue() == busyPath && m.GetCounter().GetValue() > 0 {
				busyProc = true
			}
		}
	}
	if len(procs) == 0 || len(procs) > 20 || !busyProc {
		t.Errorf("default process series: %d (want 1..20), busy loop's process among them: %v", len(procs), busyProc)
	}
}

// needsHardware lists the documented families a real scrape can't show on
// a machine without a PMU (like the test machines); the collector tests
// check them from a snapshot.
var needsHardware = map[string]string{
	"wattrace_cgroup_perf_hardware_events_total": "hardware perf events need a PMU",
	"wattrace_cgroup_perf_cache_events_total":    "cache perf events need a PMU",
	"wattrace_source_rejected_readings_total":    "only sources that reject a reading have series",
	"wattrace_source_degraded":                   "only a degraded source has a series (tested in internal/collector and the GPU tests)",
	// The estimator's families exist only where a zone is modelled; this
	// scrape measures the platform with Redfish (TestScrapeEstimator
	// scrapes them from the estimator).
	"wattrace_node_estimated_power_watts":       "only where a zone is modelled",
	"wattrace_node_estimated_power_lower_watts": "only where a zone is modelled",
	"wattrace_node_estimated_power_upper_watts": "only where a zone is modelled",
	"wattrace_node_estimator_info":              "only where a zone is modelled",
}

var readingTime = regexp.MustCompile(`"ReadingTime":\s*"[^"]*"`)

// A real scrape of the running exporter, every collector on, passes
// promtool's linter (promlint, in process) with no finding and carries every family the
// README documents (the golden list the collector tests hold to the docs).
func TestRealScrapeLintAndFamilies(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	// A BMC serving DMTF's public Redfish mockup, so the meter families and
	// a measured platform zone are real too.
	const password = "s3cret-bmc-pw"
	bmc := redfishMockup(password)
	defer bmc.Close()
	t.Setenv("WATTRACE_TEST_BMC_PW", password)
	bin := buildExporter(t)
	// A free port: a fixed one was once held by a second checkout's run.
	addr := fmt.Sprintf("localhost:%d", testenv.FreePort(t))
	url := startExporter(t, bin, addr, "--web.listen-address="+addr,
		"--collector.process", "--collector.bpf-stats", "--power.idle-policy=cpu",
		"--power.redfish.url="+bmc.URL, "--power.redfish.auth=basic", "--power.redfish.username=admin",
		"--power.redfish.password-env=WATTRACE_TEST_BMC_PW", "--power.ipmi=off",
		"--collector.probes.counters=cpu_clock", "--collector.perf", "--collector.probes.per-cgroup",
		"--collector.probes.softirq-per-workload", "--collector.cgroup.workloads",
		"--collector.resources=cpu,memory,io,pressure,tasks",
		// Each workload's files read at every scrape: the loop below
		// waits for the IO the workloads do after the baseline.
		"--collector.resources.stale-scrapes=0")
	// Two processes in two cgroups; one opts in to profiling through its
	// environment. That one works until the test ends, so the profiler's
	// scan finds it working however late it comes on a loaded machine; the
	// other burns a little and sleeps.
	profDir := testenv.Cgroup(t, h.Mount, "prof")
	plainDir := testenv.Cgroup(t, h.Mount, "plain")
	burn := []string{"/bin/sh", "-c", "i=0; while [ $i -lt 400000 ]; do i=$((i+1)); done; exec sleep 60"}
	optIn := exec.Command("/bin/sh", append([]string{"-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`, profDir}, testenv.Busy...)...)
	optIn.Env = append(os.Environ(), "WATTRACE_PROFILE=1")
	if err := optIn.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(optIn) })
	testenv.StartIn(t, plainDir, burn...)
	// One cgroup laid out as each kind of workload the exporter names, each
	// with a process that works a little after the exporter's baseline, so
	// every workload family has series: real resolution of real cgroups.
	// The same relative path exists under every controller, as Slurm lays
	// jobs out, and under cgroup2, where pressure (PSI) is kept; the process
	// enters them all and does a little direct IO and a buffered write, so
	// resource and page-cache families have series too (on a quiet machine
	// nothing else dirties the page cache while the test runs).
	// The workloads' work below must come after the exporter's baseline, or it is not
	// new to the exporter: on a loaded machine loading BPF takes seconds,
	// so wait for the first interval rather than a fixed time.
	waitForInterval(t, url)
	var workOut syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("workloads' output:\n%s", workOut.String())
		}
	})
	top := fmt.Sprintf("wattrace-test-%d-kinds", os.Getpid())
	mounts := []string{h.Mount}
	for _, c := range []string{"memory", "blkio", "pids", "unified"} {
		if m := filepath.Join("/sys/fs/cgroup", c); m != h.Mount {
			mounts = append(mounts, m)
		}
	}
	startKindWorkloads(t, mounts, top, &workOut)
	layouts := kindLayouts
	var body []byte
	var fams map[string]*dto.MetricFamily
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		fams, body = scrape(t, url)
		if n, _ := sum(fams, "wattrace_stats_intervals_total", nil); n >= 2 && fams["wattrace_vm_energy_joules_total"] != nil &&
			fams["wattrace_job_energy_joules_total"] != nil && fams["wattrace_container_energy_joules_total"] != nil &&
			strings.Count(workOut.String(), "IO done") == len(layouts) &&
			(fams["wattrace_job_io_bytes_total"] != nil || kernelIOBytesUnder(mounts, filepath.Join(top, layouts[1].rel)) == 0) {
			if v, _ := sum(fams, "wattrace_cgroup_perf_clock_seconds_total", map[string]string{"cgroup": "/" + filepath.Base(profDir), "clock": "task_clock"}); v > 0 {
				break
			}
		}
	}
	if body == nil {
		t.Fatal("no scrape")
	}
	// Whether the kernel accounted any block IO to each level's cgroup.
	// The workloads' direct writes reach the block layer, but whether the
	// cgroup is charged depends on the host: cgroup v2 io.stat needs the io
	// controller on the unified hierarchy, and v1 blkio counted nothing for
	// direct writes to a disk with no throttle rule on the 6.18 test machine
	// (recent kernels keep v1 statistics in blk-throttle, which a disk turns
	// on with its first rule; this test sets none on the host's disk). What is certain is the kernel's
	// own figure: where it counted IO, the level's io families must be
	// there; where it counted none, they are left out as all-zero.
	ioAccounted := map[string]bool{}
	for _, l := range layouts {
		n := kernelIOBytesUnder(mounts, filepath.Join(top, l.rel))
		for _, lvl := range l.levels {
			ioAccounted[lvl] = n > 0
		}
		t.Logf("kernel's block IO of %s: %d bytes", l.rel, n)
	}
	profRel, plainRel := "/"+filepath.Base(profDir), "/"+filepath.Base(plainDir)
	if v, ok := sum(fams, "wattrace_cgroup_perf_clock_seconds_total", map[string]string{"cgroup": profRel, "clock": "task_clock"}); !ok || v <= 0 {
		t.Errorf("opted-in process's cgroup has no task_clock (%v, %v)", v, ok)
	}
	if _, ok := sum(fams, "wattrace_cgroup_perf_clock_seconds_total", map[string]string{"cgroup": plainRel}); ok {
		t.Errorf("a process that did not opt in was profiled")
	}
	checkAlloyTargets(t, url, optIn.Process.Pid)
	if v, ok := sum(fams, "wattrace_node_energy_joules_total", map[string]string{"zone": "platform", "source": "redfish", "method": "measured"}); !ok || v <= 0 {
		t.Errorf("no measured platform energy from the Redfish BMC (%v, %v)", v, ok)
	}
	testenv.Promlint(t, body)

	checkDocumentedFamilies(t, fams, ioAccounted)
}

// ioFamilyLevel returns the workload level of a cgroupfs IO family
// (wattrace_<level>_io_bytes_total, wattrace_<level>_io_requests_total).
func ioFamilyLevel(name string) (string, bool) {
	for _, suffix := range []string{"_io_bytes_total", "_io_requests_total"} {
		if rest, ok := strings.CutSuffix(name, suffix); ok {
			lvl := strings.TrimPrefix(rest, "wattrace_")
			return lvl, lvl != "cgroup" && lvl != "node"
		}
	}
	return "", false
}

// kernelIOBytesUnder sums kernelIOBytes of rel under each mount.
func kernelIOBytesUnder(mounts []string, rel string) uint64 {
	var n uint64
	for _, m := range mounts {
		n += kernelIOBytes(filepath.Join(m, rel))
	}
	return n
}

// kernelIOBytes is the block IO the kernel charged to cgroup dir: v1
// blkio.throttle.io_service_bytes_recursive's Total, or v2 io.stat's
// rbytes and wbytes; 0 where dir has neither.
func kernelIOBytes(dir string) uint64 {
	var n uint64
	if b, err := os.ReadFile(filepath.Join(dir, "blkio.throttle.io_service_bytes_recursive")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == "Total" {
				v, _ := strconv.ParseUint(f[1], 10, 64)
				n += v
			}
		}
	}
	if b, err := os.ReadFile(filepath.Join(dir, "io.stat")); err == nil {
		for _, kv := range strings.Fields(string(b)) {
			k, v, ok := strings.Cut(kv, "=")
			if ok && (k == "rbytes" || k == "wbytes") {
				x, _ := strconv.ParseUint(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// mayBeAllZero reports whether name is a family at a workload level that is
// left out when all its series are zero: a probe family, or a resource
// family of what these short test workloads may never use.
func mayBeAllZero(name string) bool {
	// memory_limit_bytes: a workload without a limit has none.
	suffixes := []string{"memory_cache_bytes", "memory_swap_bytes", "memory_fail_count_total", "memory_oom_kills_total", "pressure_seconds_total",
		"memory_limit_bytes"}
	for _, f := range reading.ProbeFamilies {
		suffixes = append(suffixes, f.Name)
	}
	for _, l := range ident.Levels() {
		for _, s := range suffixes {
			if name == "wattrace_"+string(l)+"_"+s {
				return true
			}
		}
	}
	return false
}

// syncBuffer is a bytes.Buffer that several processes' output can share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// redfishMockup is a BMC serving DMTF's public Redfish mockup to admin
// with password, each answer stamped with the time now.
func redfishMockup(password string) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != "admin" || p != password {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		rel := strings.TrimPrefix(r.URL.Path, "/redfish/v1")
		if strings.Contains(rel, "..") || r.Method != http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		body, err := os.ReadFile(filepath.Join("../../pkg/power/redfish/testdata/public-rackmount1", rel, "index.json"))
		if err != nil {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		// A live BMC refreshes its sensors; the mockup's reading time
		// is frozen in 2019, so stamp each answer with the time now.
		body = readingTime.ReplaceAll(body, []byte(`"ReadingTime": "`+time.Now().UTC().Format(time.RFC3339)+`"`))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
}

// waitForInterval waits for the exporter at url to complete its first
// stats interval.
func waitForInterval(t *testing.T, url string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if fams, _ := scrape(t, url); fams != nil {
			if n, _ := sum(fams, "wattrace_stats_intervals_total", nil); n >= 1 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("exporter completed no stats interval in 30 s")
		}
	}
}

// kindLayouts are one cgroup laid out as each kind of workload the exporter
// names, with the workload levels it is exported at.
var kindLayouts = []struct {
	rel    string
	levels []string
}{
	{"system.slice/wattrace-e2e.service", []string{"unit"}},
	{"slurm_e2e/uid_0/job_4711/step_0/task_0", []string{"job"}},
	{"pbs_jobs.service/jobid/4712.e2e-server", []string{"pbs_job"}},
	{"machine/qemu-7-e2e-vm.libvirt-qemu/vcpu0", []string{"vm"}},
	{"kubepods/burstable/pod0b4c2c6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e/" + strings.Repeat("ab", 32), []string{"pod", "container"}},
}

// startKindWorkloads starts a process in each of kindLayouts under top in
// every mount, which works a little, writes a little (direct and
// buffered), says "IO done" to out and sleeps.
func startKindWorkloads(t *testing.T, mounts []string, top string, out *syncBuffer) {
	t.Helper()
	for _, l := range kindLayouts {
		rel := l.rel
		var enter []string
		for _, m := range mounts {
			dir := filepath.Join(m, top)
			if _, err := os.Stat(dir); err != nil {
				testenv.Mkdir(t, dir)
			}
			for _, part := range strings.Split(rel, "/") {
				dir = filepath.Join(dir, part)
				if _, err := os.Stat(dir); err != nil {
					testenv.Mkdir(t, dir)
				}
			}
			enter = append(enter, fmt.Sprintf("echo $$ > %s/cgroup.procs", dir))
		}
		script := strings.Join(enter, " && ") + ` && i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done;
f=/var/tmp/wattrace-e2e-$$; dd if=/dev/zero of=$f bs=64k count=4 oflag=direct status=none &&
dd if=/dev/zero of=$f.cached bs=64k count=4 conv=fsync status=none && echo "$0: IO done"; rm -f $f $f.cached; exec sleep 60`
		cmd := exec.Command("/bin/sh", "-c", script, rel)
		// What the workloads said (a failed move, a failed dd) is logged if
		// the test fails, to tell a missing family's cause.
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { testenv.Kill(cmd) })
	}
}

// checkAlloyTargets: /alloy-targets lists the opted-in process pid alone,
// with a service name.
func checkAlloyTargets(t *testing.T, url string, pid int) {
	t.Helper()
	resp, err := http.Get(url + "/alloy-targets")
	if err != nil {
		t.Fatal(err)
	}
	var groups []struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	err = json.NewDecoder(resp.Body).Decode(&groups)
	resp.Body.Close()
	if err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("/alloy-targets: %v (content type %q)", err, resp.Header.Get("Content-Type"))
	}
	if len(groups) != 1 || groups[0].Labels["__process_pid__"] != fmt.Sprint(pid) || groups[0].Labels["service_name"] == "" {
		t.Errorf("/alloy-targets: %+v, want just pid %d with a service name", groups, pid)
	}
}

// checkDocumentedFamilies: every family of the golden list the collector
// tests hold to the docs is in the scrape, with its documented labels,
// but those that need hardware this machine lacks, the GPUs' (absent
// here), the IO families of a level the kernel charged no IO to, and the
// families left out when all zero.
func checkDocumentedFamilies(t *testing.T, fams map[string]*dto.MetricFamily, ioAccounted map[string]bool) {
	t.Helper()
	golden, err := os.Open("../../internal/collector/testdata/families.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer golden.Close()
	sc := bufio.NewScanner(golden)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		name := f[0]
		if why, ok := needsHardware[name]; ok {
			t.Logf("%s not checked live: %s", name, why)
			continue
		}
		fam := fams[name]
		if strings.HasPrefix(name, "wattrace_gpu_") {
			// This machine has no GPU: the families must be absent
			// (TestScrapeWithGPUFixture scrapes them with a GPU).
			if fam != nil {
				t.Errorf("%s present on a node without GPUs", name)
			}
			continue
		}
		if lvl, ok := ioFamilyLevel(name); ok && fam == nil && !ioAccounted[lvl] {
			t.Logf("%s absent: the kernel accounted no block IO to the %s's cgroup", name, lvl)
			continue
		}
		if fam == nil && mayBeAllZero(name) {
			// A level whose workloads never used a probed resource
			// (these test workloads don't touch the network) or never
			// swapped, stalled or hit a limit has no family of zeros.
			t.Logf("%s absent: all zero at its level", name)
			continue
		}
		if fam == nil {
			t.Errorf("documented family %s missing from a real scrape", name)
			continue
		}
		var want []string
		if len(f) > 2 {
			want = strings.Split(f[2], ",")
		}
		sort.Strings(want)
		var got []string
		for _, l := range fam.GetMetric()[0].GetLabel() {
			got = append(got, l.GetName())
		}
		sort.Strings(got)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s labels %v, documented %v", name, got, want)
		}
	}
}
