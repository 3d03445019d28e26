//go:build e2e

package e2e

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// launcherRunsEnv sets how many launcher-style jobs TestSlurmLauncherJobs
// runs on its one Slurm bring-up: 20 in a row shows the launcher path
// holding up over many jobs; make e2e runs 3 to keep its time.
const launcherRunsEnv = "WATTRACE_E2E_LAUNCHER_RUNS"

// TestSlurmLauncherJobs runs, one after another on one real Slurm, jobs
// that do nothing but spawn 200 /bin/true (and then idle), the way a
// launcher starts a job's processes: each is forked by the job's shell
// and lives a millisecond or two, so almost all of the job's CPU time is
// in processes no read ever sees alive, and the part each ran before it
// was placed in the job's cgroup belongs to where it ran. Each job's
// wattrace_job_cpu_seconds_total must be within 1% of its cgroup's
// cpuacct.usage (read in the job's idle tail), in every run. The job's
// last exits (its shell's, as the job ends) come after the last 50 ms
// sample of cpuacct.usage, so wattrace's figure runs up to about 0.5% above
// it here (20 runs on 2026-11-24: +0.09% to +0.47%); before the dead hook,
// skipped free hooks left 4 of 20 runs 1–3% under it.
func TestSlurmLauncherJobs(t *testing.T) {
	requireRoot(t)
	slurmLock(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err != nil {
		t.Fatalf("Slurm's cgroup/v1 plugin needs the v1 cpuacct controller at /sys/fs/cgroup/cpuacct: %v", err)
	}
	runs := 3
	if v := os.Getenv(launcherRunsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("%s=%q: want a positive count", launcherRunsEnv, v)
		}
		runs = n
	}
	begin := time.Now()
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, "/var/log/slurm/slurmd.log", 30)
		}
		if _, err := script(t, 3*time.Minute, "slurm.sh", "clean"); err != nil {
			t.Errorf("slurm.sh clean: %v", err)
		}
	})
	if _, err := script(t, 12*time.Minute, "slurm.sh", "reset"); err != nil {
		t.Fatalf("slurm.sh reset: %v", err)
	}
	t.Logf("slurm up after %v", time.Since(begin).Round(time.Millisecond))
	e := startExporter(t, "--accounting.mode=bpf", "--collector.bpf-stats")

	outDir, err := os.MkdirTemp("", "wattrace-e2e-launcher-out-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(outDir) })

	var worst float64
	for i := 0; i < runs; i++ {
		j := &slurmJob{name: fmt.Sprintf("wattrace-e2e-launch-%d", i), user: "root", uid: "0",
			script: "i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; sleep 2"}
		out, err := run(20*time.Second, nil, "sbatch", "--parsable", "-J", j.name, "-N1", "-n1", "-c1", "--chdir=/tmp",
			"-o", filepath.Join(outDir, j.name+".out"), "--wrap", j.script)
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		j.id = strings.SplitN(out, ";", 2)[0]
		done := make(chan struct{})
		go j.sample(time.Now().Add(60*time.Second), done)
		<-done
		j.mu.Lock()
		seen, stable, ref, tail := j.seen, j.stable, float64(j.usage)/1e9, j.tail
		j.mu.Unlock()
		if !seen || !stable {
			t.Fatalf("run %d, job %s: cgroup seen %v, idle tail reached %v; last samples:%s", i, j.id, seen, stable, tail)
		}
		fams := e.waitIntervals(t, 2)
		got, ok := sum(fams, "wattrace_job_cpu_seconds_total", map[string]string{"job_id": j.id})
		cg, n := sumWhere(fams, "wattrace_cgroup_cpu_seconds_total", jobCgroups(j))
		off := 100 * (got - ref) / ref
		t.Logf("run %d, job %s: wattrace_job_cpu_seconds_total %.4f s, its cgroups %.4f s over %d, cpuacct.usage %.4f s (%+.3f%%)",
			i, j.id, got, cg, n, ref, off)
		if ref < 0.05 {
			t.Errorf("run %d, job %s: cpuacct.usage %.4f s: the 200 processes did not run", i, j.id, ref)
		}
		if !ok || !within(got, ref, 0.01) {
			t.Errorf("run %d, job %s: wattrace_job_cpu_seconds_total %.4f s against cpuacct.usage %.4f s, want within 1%%", i, j.id, got, ref)
			dump(t, fams, jobCgroups(j), "wattrace_cgroup_cpu_seconds_total")
			dump(t, fams, nil, "wattrace_source_rejected_readings_total", "wattrace_bpf_program_runs_total", "wattrace_bpf_map_drops_total")
		}
		worst = math.Max(worst, math.Abs(off))
	}
	t.Logf("%d launcher-style jobs: worst %.3f%% off cpuacct.usage; took %v", runs, worst, time.Since(begin).Round(time.Millisecond))
}
