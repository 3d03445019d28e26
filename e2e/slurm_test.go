//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

const (
	slurmNode   = "localhost"                                 // slurm.sh's node name
	slurmCgroup = "/sys/fs/cgroup/cpuacct/slurm_" + slurmNode // the v1 plugin's root, slurm_<node>
)

// slurmJob is a job the test submitted and what its cgroup said.
type slurmJob struct {
	name, user, uid string
	id              string
	script          string

	mu      sync.Mutex
	usage   uint64    // last cpuacct.usage of the job cgroup, ns
	at      time.Time // when usage was read
	stable  bool      // usage moved < 10 ms over the last second: the idle tail was reached
	seen    bool
	samples int
	tail    string // the last samples, for failure messages
}

func (j *slurmJob) cgroup() string {
	return filepath.Join(slurmCgroup, "uid_"+j.uid, "job_"+j.id)
}

// sample polls the job cgroup's cpuacct.usage every 50 ms until the cgroup
// is gone (Slurm removes it when the job ends) or the deadline passes. The
// jobs end with an idle `sleep 2`, so the last reading is the job's total.
func (j *slurmJob) sample(deadline time.Time, done chan<- struct{}) {
	defer close(done)
	path := filepath.Join(j.cgroup(), "cpuacct.usage")
	type point struct {
		at time.Time
		v  uint64
	}
	var hist, long []point
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(path)
		if err != nil {
			j.mu.Lock()
			seen := j.seen
			j.mu.Unlock()
			if seen {
				return // the job ended
			}
			time.Sleep(50 * time.Millisecond)
			continue
		}
		v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		if err == nil {
			now := time.Now()
			hist = append(hist, point{now, v})
			for len(hist) > 1 && now.Sub(hist[1].at) >= time.Second {
				hist = hist[1:]
			}
			long = append(long, point{now, v})
			for len(long) > 1 && now.Sub(long[0].at) > 3*time.Second {
				long = long[1:]
			}
			var tail strings.Builder
			for _, p := range long {
				fmt.Fprintf(&tail, " %s:%d", p.at.Format("15:04:05.000"), p.v)
			}
			j.mu.Lock()
			j.tail = tail.String()
			j.seen, j.usage, j.at = true, v, now
			// The tail's processes exiting cost a little (<1 ms).
			j.stable = now.Sub(hist[0].at) >= 900*time.Millisecond && v-hist[0].v < 10e6
			j.samples++
			j.mu.Unlock()
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSlurmJobs runs a real single-node Slurm (munge, slurmctld, slurmd
// from Debian's packages, cgroup/v1 plugin), the exporter in BPF mode with
// the default hierarchy (cpuacct here), and two concurrent batch jobs with
// different CPU loads, one as root and one as nobody. When both have ended,
// the exporter must report each job's CPU time within 1% of its job
// cgroup's cpuacct.usage (read during the job's idle last seconds), and
// job energy in the ratio of the jobs' CPU time within 2%.
func TestSlurmJobs(t *testing.T) {
	requireRoot(t)
	slurmLock(t)
	if _, err := os.Stat("/sys/fs/cgroup/cpuacct/cpuacct.usage"); err != nil {
		t.Fatalf("Slurm's cgroup/v1 plugin needs the v1 cpuacct controller at /sys/fs/cgroup/cpuacct: %v", err)
	}
	begin := time.Now()
	resetSlurm(t, begin)

	e := startExporter(t, "--accounting.mode=bpf")
	// Jobs counted before ours (none in CI; tests running beside this one
	// may make fake job cgroups).
	running0, _ := sum(e.mustScrape(t), "wattrace_units_running", map[string]string{"level": "job", "manager": "slurm"})

	outDir := jobOutputDir(t)
	jobs := twoSlurmJobs()
	submitJobs(t, jobs, outDir)
	maxRunning := watchJobs(t, e, jobs)
	checkJobsCompleted(t, jobs, outDir)
	if t.Failed() {
		t.FailNow()
	}

	// The final totals: a few intervals after the last job cgroup went.
	fams := e.waitIntervals(t, 3)
	t.Log("after the jobs ended:")
	dump(t, fams, jobCgroups(jobs...), "wattrace_cgroup_cpu_seconds_total", "wattrace_cgroup_energy_joules_total")
	dump(t, fams, nil, "wattrace_job_cpu_seconds_total", "wattrace_job_energy_joules_total", "wattrace_units_running", "wattrace_accounting_mode")
	t.Logf("wattrace_units_running{level=job,manager=slurm} at most %v while the jobs ran", maxRunning)

	if v, _ := sum(fams, "wattrace_accounting_mode", map[string]string{"mode": "bpf"}); v != 1 {
		t.Errorf("wattrace_accounting_mode{mode=\"bpf\"} = %v, want 1", v)
	}
	if maxRunning < running0+2 {
		t.Errorf("wattrace_units_running{level=\"job\",manager=\"slurm\"} peaked at %v while both jobs ran (%v before), want >= %v", maxRunning, running0, running0+2)
	}
	waitNoJobRunning(t, e, running0)

	cpu := map[string]float64{}
	energy := map[string]float64{}
	for _, j := range jobs {
		cpu[j.id], energy[j.id] = checkJobTotals(t, fams, j)
	}
	checkEnergyRatio(t, jobs[0].id, jobs[1].id, cpu, energy)
	t.Logf("TestSlurmJobs body took %v", time.Since(begin).Round(time.Millisecond))
}

// resetSlurm brings the bed up with fresh controller state, so no job of an
// earlier run is around, and registers its clean-up (which shows the
// daemons' logs when the test failed).
func resetSlurm(t *testing.T, begin time.Time) {
	t.Helper()
	// Registered first, so it runs last: after the exporter has stopped.
	t.Cleanup(func() {
		if t.Failed() {
			tailFile(t, "/var/log/slurm/slurmctld.log", 30)
			tailFile(t, "/var/log/slurm/slurmd.log", 30)
		}
		if _, err := script(t, 3*time.Minute, "slurm.sh", "clean"); err != nil {
			t.Errorf("slurm.sh clean: %v", err)
		}
		if _, err := os.Stat(slurmCgroup); err == nil {
			t.Errorf("%s still exists after slurm.sh clean", slurmCgroup)
		}
	})
	if _, err := script(t, 12*time.Minute, "slurm.sh", "reset"); err != nil {
		t.Fatalf("slurm.sh reset: %v", err)
	}
	t.Logf("slurm up after %v", time.Since(begin).Round(time.Millisecond))
}

// jobOutputDir is a directory for the jobs' output, writable by nobody.
func jobOutputDir(t *testing.T) string {
	t.Helper()
	outDir, err := os.MkdirTemp("", "wattrace-e2e-slurm-out-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(outDir) })
	if err := os.Chmod(outDir, 0o777); err != nil {
		t.Fatal(err)
	}
	return outDir
}

// twoSlurmJobs are the test's jobs: different CPU loads, one as root with
// two steps, one as nobody with many short-lived processes.
func twoSlurmJobs() []*slurmJob {
	const busy = `timeout %d sh -c 'while :; do :; done'`
	return []*slurmJob{
		{
			// Two steps: an srun step busy for 8 s, then the batch
			// step itself busy for 2 s; then idle.
			name: "wattrace-e2e-a", user: "root", uid: "0",
			script: fmt.Sprintf("srun -n1 -c1 %s; %s; sleep 2", fmt.Sprintf(busy, 8), fmt.Sprintf(busy, 2)),
		},
		{
			// As nobody: busy for 3 s, then 200 short-lived processes
			// (their CPU time must not be lost when they exit); then idle.
			name: "wattrace-e2e-b", user: "nobody", uid: "65534",
			script: fmt.Sprintf("%s; i=0; while [ $i -lt 200 ]; do /bin/true; i=$((i+1)); done; sleep 2", fmt.Sprintf(busy, 3)),
		},
	}
}

// submitJobs submits each job with sbatch and records its id.
func submitJobs(t *testing.T, jobs []*slurmJob, outDir string) {
	t.Helper()
	for _, j := range jobs {
		args := []string{"--parsable", "-J", j.name, "-N1", "-n1", "-c1", "--chdir=/tmp",
			"-o", filepath.Join(outDir, j.name+".out"), "--wrap", j.script}
		if j.user != "root" {
			args = append([]string{"--uid=" + j.user, "--gid=nogroup"}, args...)
		}
		out, err := run(20*time.Second, nil, "sbatch", args...)
		if err != nil {
			t.Fatalf("sbatch: %v", err)
		}
		j.id = strings.SplitN(out, ";", 2)[0]
		t.Logf("job %s (%s, user %s): %s", j.id, j.name, j.user, j.script)
	}
}

// watchJobs samples each job cgroup until it disappears, and watches the
// exporter meanwhile: it returns the most jobs counted as running at once
// (both jobs must be, at some point), and logs the jobs' cgroup series as
// last seen while they ran.
func watchJobs(t *testing.T, e *exporter, jobs []*slurmJob) float64 {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	var dones []chan struct{}
	for _, j := range jobs {
		d := make(chan struct{})
		dones = append(dones, d)
		go j.sample(deadline, d)
	}
	maxRunning := 0.0
	var during families
	allDone := func() bool {
		for _, d := range dones {
			select {
			case <-d:
			default:
				return false
			}
		}
		return true
	}
	for !allDone() {
		if fams, err := e.scrape(); err == nil {
			if v, ok := sum(fams, "wattrace_units_running", map[string]string{"level": "job", "manager": "slurm"}); ok && v > maxRunning {
				maxRunning = v
			}
			if n, _ := sumWhere(fams, "wattrace_cgroup_cpu_seconds_total", jobCgroups(jobs...)); n > 0 {
				during = fams
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if time.Now().After(deadline) {
		t.Fatalf("jobs did not end within 90 s")
	}
	if during != nil {
		t.Log("while the jobs ran:")
		dump(t, during, jobCgroups(jobs...), "wattrace_cgroup_cpu_seconds_total")
	}
	return maxRunning
}

// checkJobsCompleted: each job completed, its cgroup was seen, and its
// cpuacct.usage was read during its idle tail (so it is the job's total).
func checkJobsCompleted(t *testing.T, jobs []*slurmJob, outDir string) {
	t.Helper()
	for _, j := range jobs {
		state, err := run(10*time.Second, nil, "scontrol", "show", "job", "-o", j.id)
		if err != nil {
			t.Errorf("scontrol show job %s: %v", j.id, err)
			continue
		}
		if !strings.Contains(state, "JobState=COMPLETED") {
			b, _ := os.ReadFile(filepath.Join(outDir, j.name+".out"))
			t.Errorf("job %s did not complete: %s\noutput:\n%s", j.id, state, b)
		}
		j.mu.Lock()
		t.Logf("job %s cgroup %s: final cpuacct.usage %.4f s (%d samples, the last read %v ago, idle tail reached: %v)",
			j.id, j.cgroup(), float64(j.usage)/1e9, j.samples, time.Since(j.at).Round(time.Millisecond), j.stable)
		if !j.seen {
			t.Errorf("job %s: cgroup %s never seen", j.id, j.cgroup())
		} else if !j.stable {
			t.Errorf("job %s: cpuacct.usage still moving in its last sampled second: the job's idle tail was not sampled; last samples:%s", j.id, j.tail)
		}
		j.mu.Unlock()
	}
}

// waitNoJobRunning: "Workloads with at least one live cgroup": the job
// cgroups are gone, so within a few intervals no job may count as running
// (while the jobs' final totals stay exported for the retention).
func waitNoJobRunning(t *testing.T, e *exporter, running0 float64) {
	t.Helper()
	ended := time.Now()
	for {
		v, _ := sum(e.mustScrape(t), "wattrace_units_running", map[string]string{"level": "job", "manager": "slurm"})
		if v <= running0 {
			t.Logf("wattrace_units_running{level=job} back to %v %v after the final scrape", v, time.Since(ended).Round(time.Millisecond))
			return
		}
		if time.Since(ended) > 15*time.Second {
			t.Errorf("wattrace_units_running{level=\"job\",manager=\"slurm\"} is still %v 15 s after both job cgroups were removed, want %v", v, running0)
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// checkJobTotals checks one job's final series against its cgroup's
// cpuacct.usage: the job's cgroup series summed and its job series within
// 1%, the job series' labels, and positive energy. It returns the job
// series' CPU seconds and joules (zero when the job has no single CPU
// series).
func checkJobTotals(t *testing.T, fams families, j *slurmJob) (cpu, energy float64) {
	t.Helper()
	ref := float64(j.usage) / 1e9

	// What exists today: the job's cgroups, summed.
	cg, n := sumWhere(fams, "wattrace_cgroup_cpu_seconds_total", jobCgroups(j))
	t.Logf("job %s: cgroup series %.4f s over %d cgroups vs cpuacct.usage %.4f s (%+.3f%%)", j.id, cg, n, ref, 100*(cg-ref)/ref)
	if n == 0 || !within(cg, ref, 0.01) {
		t.Errorf("job %s: wattrace_cgroup_cpu_seconds_total summed over the job's cgroups is %.4f s, cgroup cpuacct.usage %.4f s: want within 1%%", j.id, cg, ref)
	}

	want := map[string]string{"job_id": j.id}
	ms := match(fams, "wattrace_job_cpu_seconds_total", labelsEq(want))
	if len(ms) != 1 {
		t.Errorf("job %s: %d series of wattrace_job_cpu_seconds_total, want 1", j.id, len(ms))
		return 0, 0
	}
	for k, v := range map[string]string{"user": j.user, "uid": j.uid, "slurm_node": slurmNode} {
		if got := label(ms[0], k); got != v {
			t.Errorf("job %s: label %s=%q, want %q", j.id, k, got, v)
		}
	}
	cpu = value(ms[0])
	t.Logf("job %s: wattrace_job_cpu_seconds_total %.4f s vs cpuacct.usage %.4f s (%+.3f%%)", j.id, cpu, ref, 100*(cpu-ref)/ref)
	if !within(cpu, ref, 0.01) {
		t.Errorf("job %s: wattrace_job_cpu_seconds_total %.4f s, cgroup cpuacct.usage %.4f s: want within 1%%", j.id, cpu, ref)
	}
	energy, ok := sum(fams, "wattrace_job_energy_joules_total", want)
	if !ok || energy <= 0 {
		t.Errorf("job %s: no positive wattrace_job_energy_joules_total (%v)", j.id, energy)
	}
	return cpu, energy
}

// checkEnergyRatio: jobs a and b's energy in the ratio of their CPU time
// within 2%.
func checkEnergyRatio(t *testing.T, a, b string, cpu, energy map[string]float64) {
	t.Helper()
	if cpu[a] > 0 && cpu[b] > 0 && energy[a] > 0 && energy[b] > 0 {
		cr, er := cpu[a]/cpu[b], energy[a]/energy[b]
		t.Logf("job %s / job %s: CPU %.4f, energy %.4f (%+.3f%%); energy per CPU-second %.3f and %.3f J/s",
			a, b, cr, er, 100*(er-cr)/cr, energy[a]/cpu[a], energy[b]/cpu[b])
		if !within(er, cr, 0.02) {
			t.Errorf("energy ratio %.4f of jobs %s/%s differs from their CPU ratio %.4f by more than 2%%", er, a, b, cr)
		}
	}
}

// jobCgroups selects cgroup series of the jobs' cgroups (the job's own and
// every step and task below it).
func jobCgroups(jobs ...*slurmJob) func(*dto.Metric) bool {
	return func(m *dto.Metric) bool {
		cg := label(m, "cgroup")
		for _, j := range jobs {
			p := "/slurm_" + slurmNode + "/uid_" + j.uid + "/job_" + j.id
			if cg == p || strings.HasPrefix(cg, p+"/") {
				return true
			}
		}
		return false
	}
}

// TestSlurmDaemonsLeaveTheLock: `flock LOCK e2e/slurm.sh reset`, the way
// the bed is brought up by hand, returns with LOCK free although the bed's
// daemons (started under it) still run: slurm.sh closes the descriptors it
// inherited before it starts them, so none of them holds the lock until it
// stops. LOCK is a file of the test's own; the bed's lock is held by the
// test the usual way (testenv.Lock), so both paths are exercised.
func TestSlurmDaemonsLeaveTheLock(t *testing.T) {
	requireRoot(t)
	slurmLock(t)
	t.Setenv("SLURM_E2E_ACCOUNTING", "1")
	t.Cleanup(func() {
		if _, err := script(t, 3*time.Minute, "slurm.sh", "clean"); err != nil {
			t.Errorf("slurm.sh clean: %v", err)
		}
	})
	lock := filepath.Join(t.TempDir(), "lock")
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "flock", lock, "bash", "slurm.sh", "reset")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	t.Logf("flock %s slurm.sh reset: %v\n%s", lock, errOrOK(err), strings.TrimRight(string(out), "\n"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(lock)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Errorf("%s is still locked after flock returned: %v", lock, err)
	}
	want, err := os.Stat(lock)
	if err != nil {
		t.Fatal(err)
	}
	daemons := 0
	for _, d := range []struct{ pidfile, comm string }{
		{"/run/munge/munged.pid", "munged"}, {"/run/mysqld/mysqld.pid", "mariadbd"},
		{"/run/slurmdbd.pid", "slurmdbd"}, {"/run/slurmctld.pid", "slurmctld"}, {"/run/slurmd.pid", "slurmd"},
	} {
		b, err := os.ReadFile(d.pidfile)
		if err != nil {
			t.Errorf("%s: %v (is %s running?)", d.pidfile, err, d.comm)
			continue
		}
		pid := strings.TrimSpace(string(b))
		if comm, _ := os.ReadFile("/proc/" + pid + "/comm"); strings.TrimSpace(string(comm)) != d.comm {
			t.Errorf("%s names pid %s, which is %q, not %s", d.pidfile, pid, strings.TrimSpace(string(comm)), d.comm)
			continue
		}
		daemons++
		fds, _ := filepath.Glob("/proc/" + pid + "/fd/*")
		for _, p := range fds {
			if fi, err := os.Stat(p); err == nil && os.SameFile(fi, want) {
				t.Errorf("%s (pid %s) holds the lock file open as %s", d.comm, pid, p)
			}
		}
	}
	if daemons != 5 {
		t.Errorf("%d of the 5 daemons checked", daemons)
	}
}
