package profiling

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/reading"
)

// helperEnv makes the test binary act as a helper process (see TestMain).
const helperEnv = "WATTRACE_PROFILING_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "threads" {
		threadsHelper()
		return
	}
	os.Exit(m.Run())
}

// threadsHelper waits for a line on stdin, then starts three threads that
// spin until the process is killed: threads created after the profiler
// opened the process's counters.
func threadsHelper() {
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	for range 3 {
		go func() {
			runtime.LockOSThread()
			for n := 0; ; n++ {
				_ = n
			}
		}()
	}
	select {}
}

// cleanEnv is the test's environment without any opt-in variable, so a
// developer's or CI's own WATTRACE_PROFILE cannot opt the control in.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, DefaultEnvVar+"=") {
			env = append(env, kv)
		}
	}
	return env
}

// startBusy starts a CPU-burning shell with extra environment entries,
// pinned to CPU 0 so that the busy processes preempt each other.
func startBusy(t *testing.T, extra ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(testenv.Busy[0], testenv.Busy[1:]...)
	cmd.Env = append(cleanEnv(), extra...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start busy process: %v", err)
	}
	t.Cleanup(func() { testenv.Kill(cmd) })
	pin(t, cmd.Process.Pid)
	return cmd
}

func pin(t *testing.T, pid int) {
	t.Helper()
	var set unix.CPUSet
	set.Set(0)
	if err := unix.SchedSetaffinity(pid, &set); err != nil {
		t.Fatalf("pin pid %d to CPU 0: %v", pid, err)
	}
}

// procOf describes a running process the way an accounting source does.
// It first waits for the process's exec to finish: exec.Cmd.Start returns
// once the old image is gone, but the kernel fills in the new environment
// a moment later, and until then environ reads empty.
func procOf(t *testing.T, pid int) reading.ProcessUsage {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err == nil && len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("environment of pid %d still empty: %v", pid, err)
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read stat of %d: %v", pid, err)
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22, starttime
	if err != nil {
		t.Fatalf("parse starttime of %d: %v", pid, err)
	}
	comm := s[strings.IndexByte(s, '(')+1 : strings.LastIndexByte(s, ')')]
	return reading.ProcessUsage{Key: reading.ProcKey{PID: uint32(pid), StartTime: start}, Comm: comm, CPU: -1, Alive: true}
}

func sched(t *testing.T, pid int) float64 {
	t.Helper()
	ns, err := testenv.SchedRuntime(pid)
	if err != nil {
		t.Fatal(err)
	}
	return float64(ns)
}

// clockAgrees fails t when a perf clock's count got differs from the
// schedstat runtime want by more than 5% plus the time stolen meanwhile.
func clockAgrees(t *testing.T, what string, got, want, stolen float64) {
	t.Helper()
	if d := testenv.RelDiff(got, want); d > 0.05 && (got < want || got-want > 0.05*want+stolen) {
		t.Errorf("%s %.0f ns, schedstat runtime delta %.0f ns: off by %.1f%% (> 5%%, %.0f ns stolen meanwhile)", what, got, want, 100*d, stolen)
	}
}

func newRootProfiler(t *testing.T, ops counterOps) *Profiler {
	t.Helper()
	testenv.RequireRoot(t)
	p, err := newProfiler(Config{
		EnvVars:  []string{"WATTRACE_TEST_OTHER", DefaultEnvVar},
		Hardware: []string{"cpu_cycles", "instructions"},
		Software: []string{"task_clock", "cpu_clock", "context_switches", "page_faults"},
		Log:      zaptest.NewLogger(t, zaptest.Level(zap.DebugLevel)),
	}, ops)
	if err != nil {
		t.Fatalf("new profiler: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func find(pcs []reading.ProcessCounts, pid int) (reading.ProcessCounts, bool) {
	for _, pc := range pcs {
		if int(pc.Key.PID) == pid {
			return pc, true
		}
	}
	return reading.ProcessCounts{}, false
}

// TestOptInProfilesOnlyOptedIn runs two identical busy processes that
// differ only by WATTRACE_PROFILE=1 and checks that only that one is
// counted, that its task clock matches the kernel's own runtime
// accounting, and that its final counts survive its exit.
func TestOptInProfilesOnlyOptedIn(t *testing.T) {
	p := newRootProfiler(t, kernelOps{})
	// Hardware events are counted where there is a PMU and reported
	// unavailable (not retried) where there is none, as in most VMs.
	for _, name := range []string{"cpu_cycles", "instructions"} {
		_, gone := p.Unavailable()[name]
		counted := false
		for _, ev := range p.Events() {
			counted = counted || ev.Name == name
		}
		if gone == counted {
			t.Errorf("%s: unavailable=%v counted=%v, want exactly one", name, gone, counted)
		}
	}
	for _, name := range []string{"task_clock", "cpu_clock", "context_switches", "page_faults"} {
		if reason, gone := p.Unavailable()[name]; gone {
			t.Fatalf("software event %s unavailable: %s", name, reason)
		}
	}

	in := startBusy(t, DefaultEnvVar+"=1")
	out := startBusy(t)
	pin, pout := in.Process.Pid, out.Process.Pid
	procs := []reading.ProcessUsage{procOf(t, pin), procOf(t, pout)}

	if exited := p.Scan(procs); len(exited) != 0 {
		t.Fatalf("first scan reported %d exited processes", len(exited))
	}
	r0, s0 := sched(t, pin), testenv.StolenNs(t)
	if st := p.Stats(); st.Profiled != 1 || !st.InheritThread {
		t.Fatalf("stats %+v, want 1 process profiled with inherit_thread (kernel %s)", st, kernelRelease())
	}
	time.Sleep(time.Second)
	r1 := sched(t, pin)
	counts := p.Read()
	r2 := sched(t, pin)
	stolen := testenv.StolenNs(t) - s0

	if len(counts) != 1 {
		t.Fatalf("Read returned %d processes, want 1: %+v", len(counts), counts)
	}
	if _, ok := find(counts, pout); ok {
		t.Fatalf("process %d without %s was profiled", pout, DefaultEnvVar)
	}
	pc, ok := find(counts, pin)
	if !ok {
		t.Fatalf("opted-in process %d not profiled", pin)
	}
	// schedstat before and after the read bracket the counter's value.
	want := (r1+r2)/2 - r0
	for _, clock := range []string{"task_clock", "cpu_clock"} {
		got := pc.Counts[clock]
		clockAgrees(t, clock, got, want, stolen)
		t.Logf("%s %.0f ns vs schedstat %.0f ns (%.2f%%)", clock, got, want, 100*testenv.RelDiff(got, want))
	}
	// Both pinned to CPU 0, the two busy loops preempt each other.
	if cs := pc.Counts["context_switches"]; cs <= 0 {
		t.Errorf("context_switches %v, want > 0", cs)
	}
	for name := range p.Unavailable() {
		if _, ok := pc.Counts[name]; ok {
			t.Errorf("unavailable event %s has counts", name)
		}
	}

	testenv.Kill(in)
	exited := p.Scan(procs[1:])
	if len(exited) != 1 || int(exited[0].Key.PID) != pin || exited[0].Alive {
		t.Fatalf("scan after kill returned %+v, want the final counts of pid %d", exited, pin)
	}
	final := exited[0].Counts
	for name, v := range pc.Counts {
		if final[name] < v {
			t.Errorf("final %s %.0f < earlier read %.0f", name, final[name], v)
		}
	}
	if final["task_clock"] > pc.Counts["task_clock"]+2e9 {
		t.Errorf("final task_clock %.0f ns grew more than the time since the read", final["task_clock"])
	}
	if got := p.Read(); len(got) != 0 {
		t.Errorf("Read after exit returned %+v", got)
	}
	if st := p.Stats(); st.Profiled != 0 || st.FDs != 0 {
		t.Errorf("stats after exit %+v, want nothing open", st)
	}
	if again := p.Scan(procs[1:]); len(again) != 0 {
		t.Errorf("final counts returned twice: %+v", again)
	}
}

// noInheritThread behaves like a kernel before 5.13, which rejects the
// inherit_thread bit.
type noInheritThread struct{ kernelOps }

func (o noInheritThread) open(ev reading.PerfEvent, tid int, inheritThread bool) (int, error) {
	if inheritThread {
		return -1, unix.EINVAL
	}
	return o.kernelOps.open(ev, tid, false)
}

// TestThreadsAreCounted checks that the counts are the whole process's:
// with inherit_thread, threads created after the counters were opened are
// counted; without it, each thread gets counters of its own.
func TestThreadsAreCounted(t *testing.T) {
	for _, tc := range []struct {
		name          string
		ops           counterOps
		inheritThread bool
	}{
		{"inherit_thread", kernelOps{}, true},
		{"per-thread", noInheritThread{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newRootProfiler(t, tc.ops)
			if got := p.Stats().InheritThread; got != tc.inheritThread {
				t.Fatalf("InheritThread %v, want %v", got, tc.inheritThread)
			}
			self, err := os.Executable()
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(self, "-test.run=^$")
			cmd.Env = append(cleanEnv(), helperEnv+"=threads", DefaultEnvVar+"=yes")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { testenv.Kill(cmd) })
			pid := cmd.Process.Pid
			procs := []reading.ProcessUsage{procOf(t, pid)}

			if !tc.inheritThread {
				// Without inheritance only threads that exist at a scan are
				// counted: let them start first.
				fmt.Fprintln(stdin)
				time.Sleep(200 * time.Millisecond)
			}
			p.Scan(procs)
			r0, s0 := sched(t, pid), testenv.StolenNs(t)
			if tc.inheritThread {
				fmt.Fprintln(stdin) // the spinning threads start now
			}
			// A second, or longer where other work starves the threads:
			// until they have most of a CPU-second (checked below).
			for began := time.Now(); ; {
				time.Sleep(250 * time.Millisecond)
				if el := time.Since(began); el >= time.Second && sched(t, pid)-r0 >= 0.6e9 || el > 20*time.Second {
					break
				}
			}
			p.Scan(procs)
			r1 := sched(t, pid)
			counts := p.Read()
			r2 := sched(t, pid)
			stolen := testenv.StolenNs(t) - s0
			if len(counts) != 1 {
				t.Fatalf("Read returned %d processes, want 1", len(counts))
			}
			want := (r1+r2)/2 - r0
			got := counts[0].Counts["task_clock"]
			// Three spinning threads on this machine's CPUs: at least most
			// of one CPU-second, so the comparison is not of two small
			// numbers.
			if want < 0.5e9 {
				t.Fatalf("threads ran only %.0f ns", want)
			}
			clockAgrees(t, "task_clock (all threads)", got, want, stolen)
			t.Logf("task_clock %.0f ns vs schedstat %.0f ns (%.2f%%), fds %d", got, want, 100*testenv.RelDiff(got, want), p.Stats().FDs)
		})
	}
}

// TestChildProcessesNotCounted checks that a profiled process's counters
// leave out the processes it forks: they carry the opt-in variable too and
// are profiled on their own, so counting them in the parent would count
// them twice.
func TestChildProcessesNotCounted(t *testing.T) {
	p := newRootProfiler(t, kernelOps{})
	cmd := exec.Command("/bin/sh", "-c", "read go; (while :; do :; done) & wait")
	cmd.Env = append(cleanEnv(), DefaultEnvVar+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(cmd) })
	parent := cmd.Process.Pid
	// The shell forks its busy subshell only after its counters are open,
	// as a job does that forks after it was first scanned.
	p.Scan([]reading.ProcessUsage{procOf(t, parent)})
	fmt.Fprintln(stdin)
	var child int
	for deadline := time.Now().Add(5 * time.Second); child == 0 && time.Now().Before(deadline); {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", parent, parent))
		if f := strings.Fields(string(b)); len(f) > 0 {
			child, _ = strconv.Atoi(f[0])
		} else {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if child == 0 {
		t.Fatal("busy subshell did not start")
	}
	t.Cleanup(func() { _ = unix.Kill(child, unix.SIGKILL) })
	procs := []reading.ProcessUsage{procOf(t, parent), procOf(t, child)}
	p.Scan(procs)
	r0 := sched(t, child)
	time.Sleep(500 * time.Millisecond)
	counts := p.Read()
	r1 := sched(t, child)
	pp, ok1 := find(counts, parent)
	pc, ok2 := find(counts, child)
	if !ok1 || !ok2 {
		t.Fatalf("want parent %d and child %d profiled, got %+v", parent, child, counts)
	}
	// The waiting parent uses next to no CPU; with plain inherit its counter
	// would hold the child's whole runtime.
	if got := pp.Counts["task_clock"]; got > 0.05*(r1-r0) {
		t.Errorf("parent task_clock %.0f ns includes its child's (child ran %.0f ns)", got, r1-r0)
	}
	if got := pc.Counts["task_clock"]; got < 0.9*(r1-r0) {
		t.Errorf("child task_clock %.0f ns, ran %.0f ns since its counters opened", got, r1-r0)
	}
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return errors.Unwrap(err).Error()
	}
	return unix.ByteSliceToString(u.Release[:])
}
