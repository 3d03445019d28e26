//go:build e2e

// Package e2e holds wattrace's end-to-end tests against real workload
// managers: a single-node Slurm cluster (slurm.sh) and libvirt QEMU VMs
// (libvirt.sh), among them a real Linux guest running its own exporter on
// its host's share (guest.sh, guest_test.go), brought up on the test
// machine, with the real exporter binary
// scraped over HTTP; and a real Prometheus pipeline (prometheus_test.go:
// Debian's prometheus scraping wattrace, the rules and dashboards evaluated,
// agent mode remote-writing to a second Prometheus). They need root and install Debian packages with
// apt-get; run them with `make e2e` (build tag e2e, so `make test` does not
// run them). Under CI=true anything missing fails the tests; without root
// and CI they skip.
//
// Every test removes what it started, also when it fails: daemons are
// stopped by PID, VMs destroyed, cgroups and temporary files removed
// (t.Cleanup runs the scripts' down/teardown).
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/internal/testenv"
)

var (
	buildOnce sync.Once
	buildDir  string
	buildBin  string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		_ = os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// exporterBinary builds ./cmd/exporter once per test binary (the tests run
// from e2e/, the module root is its parent), without cgo and without the
// symbol table and DWARF (-s -w: stack traces keep their function names):
// a real guest's initramfs holds it, and unpacked in a 128 MiB guest the
// 33 MB of a full build does not fit beside the kernel (23 MB does).
func exporterBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "wattrace-e2e-bin-")
		if buildErr != nil {
			return
		}
		buildBin = filepath.Join(buildDir, "wattrace")
		gobin, err := exec.LookPath("go")
		if err != nil {
			gobin = "/usr/local/go/bin/go"
		}
		start := time.Now()
		cmd := exec.Command(gobin, "build", "-ldflags=-s -w", "-o", buildBin, "./cmd/exporter")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/exporter: %v\n%s", err, out)
			return
		}
		t.Logf("built exporter in %v", time.Since(start).Round(time.Millisecond))
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// requireRoot fails under CI and skips otherwise when not root.
func requireRoot(t *testing.T) { testenv.RequireRoot(t) }

// slurmLock holds the Slurm bed's lock (testenv.SlurmLock) for the rest of
// the test, before the test registers the bed's clean-up, so the lock is
// released only after that has run. Tests on this machine share the one
// bed; run them directly (the test takes the lock) or under
// `flock /tmp/lock.slurm`, whose lock it then uses.
func slurmLock(t *testing.T) { testenv.Lock(t, testenv.SlurmLock) }

// libvirtLock holds the libvirt bed's lock (testenv.LibvirtLock) for the
// rest of the test, as slurmLock does for Slurm's: take it before
// registering the bed's teardown.
func libvirtLock(t *testing.T) { testenv.Lock(t, testenv.LibvirtLock) }

// script runs e2e/<name> args... bounded by limit, in its own process group
// so that a timeout kills everything it started, and logs its output.
func script(t *testing.T, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s: %v in %v\n%s", name, strings.Join(args, " "), errOrOK(err), time.Since(start).Round(time.Millisecond),
		strings.TrimRight(string(out), "\n"))
	if ctx.Err() != nil {
		err = fmt.Errorf("%s %s: timed out after %v", name, strings.Join(args, " "), limit)
	}
	return string(out), err
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// run runs a command bounded by limit and returns its trimmed stdout.
func run(limit time.Duration, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(os.Environ(), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// tailFile logs the last n lines of a file (for failures).
func tailFile(t *testing.T, path string, n int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Logf("%s: %v", path, err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	t.Logf("last %d lines of %s:\n%s", len(lines), path, strings.Join(lines, "\n"))
}

type exporter struct {
	url  string
	log  string
	stop func()
}

// freePort asks the kernel for an unused TCP port on localhost.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "localhost:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startExporter runs the exporter binary on a free localhost port with
// --stats.interval=1s plus args, waits until it has finished an interval,
// and registers its stop (SIGINT, which must end it cleanly within 15 s).
func startExporter(t *testing.T, args ...string) *exporter {
	t.Helper()
	return startExporterAt(t, fmt.Sprintf("localhost:%d", freePort(t)), args...)
}

// startExporterAt is startExporter on a given address; e.stop stops it
// earlier than the test's end (a restart on the same address).
func startExporterAt(t *testing.T, addr string, args ...string) *exporter {
	t.Helper()
	bin := exporterBinary(t)
	logPath := filepath.Join(t.TempDir(), "exporter.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	// Per-cgroup series for every cgroup, workloads' included: the
	// checks compare each cgroup with its cgroupfs counters and sum the
	// cgroups to the node.
	args = append([]string{"--web.listen-address=" + addr, "--stats.interval=1s", "--collector.cgroup.workloads"}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("exporter pid %d: %s %s", cmd.Process.Pid, bin, strings.Join(args, " "))
	var once sync.Once
	e := &exporter{url: "http://" + addr, log: logPath}
	e.stop = func() {
		once.Do(func() {
			_ = cmd.Process.Signal(os.Interrupt)
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("exporter exited with %v", err)
				}
			case <-time.After(15 * time.Second):
				_ = cmd.Process.Kill()
				<-done
				t.Errorf("exporter did not stop on SIGINT within 15 s")
			}
			logf.Close()
			if t.Failed() {
				tailFile(t, logPath, 60)
			}
		})
	}
	t.Cleanup(e.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if fams, err := e.scrape(); err == nil {
			if n, _ := sum(fams, "wattrace_stats_intervals_total", nil); n >= 1 {
				return e
			}
		}
		if cmd.ProcessState != nil || time.Now().After(deadline) {
			tailFile(t, logPath, 60)
			t.Fatalf("exporter did not serve a completed interval within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type families = map[string]*dto.MetricFamily

var httpClient = &http.Client{Timeout: 10 * time.Second}

func (e *exporter) scrape() (families, error) {
	resp, err := httpClient.Get(e.url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(body))
}

// mustScrape scrapes or fails the test.
func (e *exporter) mustScrape(t *testing.T) families {
	t.Helper()
	fams, err := e.scrape()
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	return fams
}

// intervals is wattrace_stats_intervals_total of a scrape.
func intervals(fams families) float64 {
	n, _ := sum(fams, "wattrace_stats_intervals_total", nil)
	return n
}

// waitIntervals waits until the exporter has finished n more intervals
// and returns that scrape.
func (e *exporter) waitIntervals(t *testing.T, n int) families {
	t.Helper()
	base := intervals(e.mustScrape(t))
	deadline := time.Now().Add(time.Duration(n)*5*time.Second + 10*time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		if fams, err := e.scrape(); err == nil && intervals(fams) >= base+float64(n) {
			return fams
		}
	}
	t.Fatalf("exporter did not finish %d intervals in time", n)
	return nil
}

// nextInterval polls until a new interval shows up (every 20 ms, at most
// 10 s), then calls at right away, so that what at reads is taken at the
// moment the scrape's figures were: within the polling period.
func (e *exporter) nextInterval(t *testing.T, at func()) families {
	t.Helper()
	base := intervals(e.mustScrape(t))
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		fams, err := e.scrape()
		if err == nil && intervals(fams) > base {
			at()
			return fams
		}
	}
	t.Fatalf("no new interval within 10 s")
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

func value(m *dto.Metric) float64 {
	return m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
}

// match returns the samples of family name whose labels pass keep (nil: all).
func match(fams families, name string, keep func(*dto.Metric) bool) []*dto.Metric {
	var out []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		if keep == nil || keep(m) {
			out = append(out, m)
		}
	}
	return out
}

// labelsEq selects samples whose labels equal want.
func labelsEq(want map[string]string) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		for k, v := range want {
			if label(m, k) != v {
				return false
			}
		}
		return true
	}
}

// sum adds the samples of a family whose labels equal want; ok is false
// when none matched.
func sum(fams families, name string, want map[string]string) (float64, bool) {
	ms := match(fams, name, labelsEq(want))
	var v float64
	for _, m := range ms {
		v += value(m)
	}
	return v, len(ms) > 0
}

// sumWhere adds the samples that pass keep.
func sumWhere(fams families, name string, keep func(*dto.Metric) bool) (float64, int) {
	ms := match(fams, name, keep)
	var v float64
	for _, m := range ms {
		v += value(m)
	}
	return v, len(ms)
}

// format renders samples in the exposition format's style, sorted.
func format(name string, ms []*dto.Metric) string {
	var lines []string
	for _, m := range ms {
		var ls []string
		for _, l := range m.GetLabel() {
			ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
		}
		lines = append(lines, fmt.Sprintf("%s{%s} %g", name, strings.Join(ls, ","), value(m)))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// dump logs the samples of the given families that pass keep.
func dump(t *testing.T, fams families, keep func(*dto.Metric) bool, names ...string) {
	t.Helper()
	var b strings.Builder
	for _, n := range names {
		ms := match(fams, n, keep)
		if fams[n] == nil {
			fmt.Fprintf(&b, "%s: family absent\n", n)
			continue
		}
		if len(ms) == 0 {
			fmt.Fprintf(&b, "%s: no matching series\n", n)
			continue
		}
		b.WriteString(format(n, ms) + "\n")
	}
	t.Logf("scrape:\n%s", strings.TrimRight(b.String(), "\n"))
}

// within reports whether got is within rel (relative) of want.
func within(got, want, rel float64) bool {
	return testenv.RelDiff(got, want) <= rel
}
