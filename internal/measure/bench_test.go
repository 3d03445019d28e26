package measure

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
)

// BenchmarkOverhead10s: measure's own CPU (its process: BPF load, meter,
// cgroup, reads) against the CPU of the 10 s command it measures, as a
// separate process like `wattrace measure`. Run under flock
// /tmp/lock.bench; docs/performance.md keeps the figure.
func BenchmarkOverhead10s(b *testing.B) {
	testenv.RequireRoot(b)
	sys := testenv.CopyFixture(b, "../../pkg/power/testdata/rapl-1socket")
	for i := 0; i < b.N; i++ {
		report := filepath.Join(b.TempDir(), "r.json")
		cmd := measureProcess(b, report, append([]string{"--path.sysfs", sys, "--accounting=bpf", "--"}, burner(b, 10)...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		rep := readReport(b, report)
		r := rep.Runs[0]
		b.ReportMetric(rep.SelfCPUSeconds, "measure-cpu-s")
		b.ReportMetric(r.CPUSeconds, "command-cpu-s")
		b.ReportMetric(100*rep.SelfCPUSeconds/r.CPUSeconds, "overhead-%")
	}
}

// BenchmarkRepeatTrue: `measure -r 20 -- /bin/true` as a process of its
// own, with the real BPF accounting and a fixture RAPL tree: the whole
// invocation's wall time (BPF load included) and that time per run, the
// figures docs/performance.md compares with `perf stat -r 20 -- true`
// (there measured with hyperfine on the built binary).
func BenchmarkRepeatTrue(b *testing.B) {
	testenv.RequireRoot(b)
	sys := testenv.CopyFixture(b, "../../pkg/power/testdata/rapl-1socket")
	var wall time.Duration
	for i := 0; i < b.N; i++ {
		report := filepath.Join(b.TempDir(), "r.json")
		cmd := measureProcess(b, report, "--path.sysfs", sys, "--accounting=bpf", "-r", "20", "--", "/bin/true")
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%v: %s", err, out)
		}
		wall += time.Since(start)
	}
	ms := float64(wall.Microseconds()) / 1e3 / float64(b.N)
	b.ReportMetric(ms, "ms/invocation")
	b.ReportMetric(ms/20, "ms/run")
}
