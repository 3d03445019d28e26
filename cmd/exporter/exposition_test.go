package main

import (
	"bytes"
	"flag"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
)

var update = flag.Bool("update", false, "rewrite testdata/exposition.golden from this run")

// The whole exporter against a fixture node, in the manner of
// node_exporter's end-to-end test: testdata/node holds a sysfs (one socket,
// four CPUs, RAPL package-0 and its dram sub-zone), a procfs (two
// processes, boot time, mounts) and a cgroup2 tree (a systemd service and a
// Slurm job's task cgroup); the real binary runs against copies of them,
// and its whole exposition is compared with testdata/exposition.golden
// after normalize. Run with -update to rewrite the golden file after an
// intended change, and review its diff.
//
// The loop's first step only takes the baseline and its second (a second
// later, on its own timer) reads the same counters, so the test advances
// the fixture (fixtureAdvance) after the second step and scrapes once more:
// the golden holds one interval's real figures, which are also asserted
// by hand below.
func TestExpositionGolden(t *testing.T) {
	bin := buildExporter(t)
	var root, url string
	for try := 1; ; try++ {
		var ok bool
		if root, url, ok = startAtSecondStep(t, bin); ok {
			break
		}
		if try == 3 {
			t.Fatal("three starts in a row were too slow to scrape between the loop's second step and its interval")
		}
	}
	asked := time.Now()
	for rel, content := range fixtureAdvance {
		writeAtomic(t, filepath.Join(root, rel), content)
	}
	// The next scrape finds the snapshot older than the interval and
	// steps the loop, which reads the advanced counters.
	time.Sleep(time.Until(asked.Add(goldenInterval + 100*time.Millisecond)))
	fams, body := scrape(t, url)
	if fams == nil {
		t.Fatal("second scrape failed")
	}
	testenv.Promlint(t, body)

	got := normalize(body)
	golden := filepath.Join("testdata", "exposition.golden")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("exposition differs from %s (rerun with -update if the change is intended, and review the diff):\n%s", golden, lineDiff(string(want), string(got)))
	}

	// The figures the golden file holds, by hand. Package: 100 J, dram:
	// 20 J, all dynamic (idle fixed at 0 W); the job's task cgroup used
	// 0.3 s of CPU and nginx.service 0.1 s, so each zone splits 3:1, and
	// the processes (python3 30 ticks, nginx 10) split the same way.
	const gPerJ = 436 / 3.6e6 // the constant provider's 436 g/kWh
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9*math.Abs(want) {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	get := func(name string, match map[string]string) float64 {
		t.Helper()
		v, ok := sum(fams, name, match)
		if !ok {
			t.Errorf("no %s series matching %v", name, match)
		}
		return v
	}
	job := map[string]string{"job_id": "42", "user": "alice", "uid": "1000"}
	nginx := map[string]string{"unit": "nginx.service", "manager": "systemd"}
	near("intervals", get("wattrace_stats_intervals_total", nil), 2)
	near("node package", get("wattrace_node_energy_joules_total", map[string]string{"zone": "package", "mode": "dynamic", "source": "rapl", "method": "measured"}), 100)
	near("node dram", get("wattrace_node_energy_joules_total", map[string]string{"zone": "dram", "mode": "dynamic"}), 20)
	near("node idle", get("wattrace_node_energy_joules_total", map[string]string{"mode": "idle"}), 0)
	near("job package", get("wattrace_job_energy_joules_total", with(job, "zone", "package")), 75)
	near("job dram", get("wattrace_job_energy_joules_total", with(job, "zone", "dram")), 15)
	near("nginx package", get("wattrace_unit_energy_joules_total", with(nginx, "zone", "package")), 25)
	near("nginx dram", get("wattrace_unit_energy_joules_total", with(nginx, "zone", "dram")), 5)
	near("python3 process", get("wattrace_process_energy_joules_total", map[string]string{"pid": "4242", "comm": "python3"}), 90)
	near("nginx process", get("wattrace_process_energy_joules_total", map[string]string{"pid": "1234", "comm": "nginx"}), 30)
	near("job CPU", get("wattrace_job_cpu_seconds_total", job), 30.3)
	near("nginx CPU", get("wattrace_unit_cpu_seconds_total", nginx), 10.1)
	near("node grams", get("wattrace_node_emissions_grams_total", nil), 120*gPerJ)
	near("job grams", get("wattrace_job_emissions_grams_total", job), 90*gPerJ)
	near("nginx grams", get("wattrace_unit_emissions_grams_total", nginx), 30*gPerJ)
	near("job memory", get("wattrace_job_memory_usage_bytes", job), 536870912)
	near("procfs up", get("wattrace_source_up", map[string]string{"source": "procfs"}), 1)
	near("rapl up", get("wattrace_source_up", map[string]string{"source": "rapl"}), 1)
}

// goldenInterval is the fixture exporter's stats.interval.
const goldenInterval = time.Second

// startAtSecondStep runs the exporter on a fresh copy of the fixture and
// scrapes it once, between the loop's second step and the end of that
// step's interval, so that nothing but the test's next scrape steps the
// loop again. It returns the copy's root and the exporter's URL, or false
// when the start was too slow to catch that window (under a heavily loaded
// machine): the caller then starts another.
//
// Settings that would make the output depend on the machine or the clock
// are pinned: procfs accounting (BPF reads the real kernel), IPMI, NVML and
// the host share off (they look at /dev, the driver and /run), libvirt's
// directories in the fixture, idle power fixed at 0 W (a learned idle
// model depends on the interval's length), a max-gap long enough that
// the loop steps only when the test asks, and every workload's cgroup
// files read at every scrape (collector.resources.stale-scrapes=0: the
// job's memory.current doubles between the two scrapes).
func startAtSecondStep(t *testing.T, bin string) (root, url string, ok bool) {
	t.Helper()
	root = testenv.CopyFixture(t, "testdata/node")
	addr := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	url = startExporter(t, bin, addr,
		"--web.listen-address="+addr,
		"--path.procfs="+filepath.Join(root, "proc"),
		"--path.sysfs="+filepath.Join(root, "sys"),
		"--path.cgroupfs="+filepath.Join(root, "cgroup"),
		"--path.etc="+filepath.Join(root, "etc"),
		"--workload.libvirt.dirs="+filepath.Join(root, "libvirt"),
		"--accounting.mode=procfs",
		"--power.ipmi=off",
		"--gpu.nvml=off",
		"--power.host-share.path=",
		"--power.idle-watts=package=0,dram=0",
		"--stats.interval="+goldenInterval.String(),
		"--stats.max-gap=1h",
		"--collector.resources.stale-scrapes=0",
	)
	// /-/healthy answers once the baseline is published, without asking
	// the loop for anything (a /metrics scrape would also read the
	// workloads' cgroup files, which the cgroupfs health counts). The
	// loop's second step follows a second after the baseline, on its own.
	// A scrape once the baseline is older than the interval is answered
	// with that second step's snapshot, as long as that one is younger
	// than the interval: the window is the second between the two steps,
	// less how late the test saw the baseline.
	healthy := time.Time{}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := http.Get(url + "/-/healthy"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				healthy = time.Now()
				break
			}
		}
	}
	if healthy.IsZero() {
		t.Fatal("exporter not healthy within 30 s")
	}
	time.Sleep(goldenInterval + 50*time.Millisecond)
	first, _ := scrape(t, url)
	if first == nil {
		t.Fatal("first scrape failed")
	}
	if n, _ := sum(first, "wattrace_stats_intervals_total", nil); n != 1 {
		t.Logf("first scrape %v after the baseline was seen: %v intervals, want 1 (the second step, which read the same counters as the baseline); starting again", time.Since(healthy), n)
		return "", "", false
	}
	if v, ok := sum(first, "wattrace_node_energy_joules_total", nil); !ok || v != 0 {
		t.Fatalf("node energy before the fixture advanced: %v (%v), want 0", v, ok)
	}
	return root, url, true
}

// fixtureAdvance is what the fixture node does between the loop's second
// step and the scrape: RAPL package-0 +100 J and dram +20 J; the Slurm
// job's task cgroup +0.3 s of CPU (python3, two threads: +24 user and +6
// system ticks of 10 ms, +50 context switches) and nginx.service +0.1 s
// (+8 and +2 ticks, +50 switches), each ancestor's usage_usec by the sum
// of its children's; and the job's memory.current doubles to 512 MiB.
var fixtureAdvance = map[string]string{
	"sys/class/powercap/intel-rapl:0/energy_uj":   "1100000000\n",
	"sys/class/powercap/intel-rapl:0:0/energy_uj": "520000000\n",

	"cgroup/cpu.stat":                                                         cpuStat(40_400_000, 30_300_000, 10_100_000),
	"cgroup/system.slice/cpu.stat":                                            cpuStat(40_400_000, 30_300_000, 10_100_000),
	"cgroup/system.slice/nginx.service/cpu.stat":                              cpuStat(10_100_000, 7_080_000, 3_020_000),
	"cgroup/system.slice/slurmstepd.scope/cpu.stat":                           cpuStat(30_300_000, 24_240_000, 6_060_000),
	"cgroup/system.slice/slurmstepd.scope/job_42/cpu.stat":                    cpuStat(30_300_000, 24_240_000, 6_060_000),
	"cgroup/system.slice/slurmstepd.scope/job_42/step_0/cpu.stat":             cpuStat(30_300_000, 24_240_000, 6_060_000),
	"cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/cpu.stat":        cpuStat(30_300_000, 24_240_000, 6_060_000),
	"cgroup/system.slice/slurmstepd.scope/job_42/step_0/user/task_0/cpu.stat": cpuStat(30_300_000, 24_240_000, 6_060_000),
	"cgroup/system.slice/slurmstepd.scope/job_42/memory.current":              "536870912\n",

	"proc/1234/stat":             "1234 (nginx) S 1 1234 1234 0 -1 4194560 500 0 0 0 708 302 0 0 20 0 1 0 50000 104857600 2560 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
	"proc/1234/status":           "Name:\tnginx\nState:\tS (sleeping)\nTgid:\t1234\nPid:\t1234\nPPid:\t1\nUid:\t33\t33\t33\t33\nGid:\t33\t33\t33\t33\nThreads:\t1\nvoluntary_ctxt_switches:\t4040\nnonvoluntary_ctxt_switches:\t1010\n",
	"proc/4242/stat":             "4242 (python3) R 4200 4242 4242 0 -1 4194304 9000 0 0 0 2424 606 0 0 20 0 2 0 90000 2147483648 65536 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 2 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
	"proc/4242/task/4242/status": "Name:\tpython3\nPid:\t4242\nvoluntary_ctxt_switches:\t110\nnonvoluntary_ctxt_switches:\t22\n",
	"proc/4242/task/4243/status": "Name:\tpython3\nPid:\t4243\nvoluntary_ctxt_switches:\t330\nnonvoluntary_ctxt_switches:\t88\n",
}

func cpuStat(usage, user, system uint64) string {
	return fmt.Sprintf("usage_usec %d\nuser_usec %d\nsystem_usec %d\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\n", usage, user, system)
}

// writeAtomic replaces a fixture file by rename, so that a reader never
// sees it half written.
func writeAtomic(t *testing.T, path, content string) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// dropped are the families of the Go runtime and of the exporter's own
// process (client_golang's Go and process collectors): memory, GC,
// threads, file descriptors and start time differ on every run and with
// every Go release, and they say nothing of wattrace's figures.
var dropped = regexp.MustCompile(`^(go|process)_`)

// masked are wattrace's families whose values depend on the wall clock,
// not on the fixture; their series (names and labels) stay in the golden
// file, their values read "<varies>".
var masked = map[string]string{
	// Energy over the interval's length, which is however long the test
	// took between its two scrapes.
	"wattrace_node_power_watts": "interval length",
	// Seconds since each source's last read, at scrape time.
	"wattrace_source_age_seconds": "time since the read",
	// The wall-clock time of the last step.
	"wattrace_stats_last_update_timestamp_seconds": "wall clock",
	// How long each collector took to render the scrape.
	"wattrace_scrape_collector_duration_seconds": "scrape duration",
}

// goVersion is the build's Go release in wattrace_build_info, which moves
// with the toolchain; the build's version and revision are empty in a test
// build (no -ldflags) and stay as they are.
var goVersion = regexp.MustCompile(`goversion="[^"]*"`)

// normalize drops and masks what normalize's tables name, so that what
// remains depends on the fixture and the code only.
func normalize(body []byte) []byte {
	var out bytes.Buffer
	for _, line := range strings.Split(strings.TrimRight(string(body), "\n"), "\n") {
		name := line
		if rest, ok := strings.CutPrefix(line, "# "); ok {
			f := strings.Fields(rest) // HELP name … or TYPE name kind
			if len(f) < 2 {
				continue
			}
			name = f[1]
		} else if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		if dropped.MatchString(name) {
			continue
		}
		if _, ok := masked[name]; ok && !strings.HasPrefix(line, "#") {
			if i := strings.LastIndexByte(line, ' '); i >= 0 {
				line = line[:i] + " <varies>"
			}
		}
		line = goVersion.ReplaceAllString(line, `goversion="<go>"`)
		out.WriteString(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// lineDiff lists the lines only in want (-) and only in got (+), in order;
// the exposition is sorted, so this reads like a diff.
func lineDiff(want, got string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	w, g := in(want), in(got)
	var b strings.Builder
	for _, l := range strings.Split(want, "\n") {
		if !g[l] {
			fmt.Fprintf(&b, "- %s\n", l)
		}
	}
	for _, l := range strings.Split(got, "\n") {
		if !w[l] {
			fmt.Fprintf(&b, "+ %s\n", l)
		}
	}
	return b.String()
}
