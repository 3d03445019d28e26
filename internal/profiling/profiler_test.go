package profiling

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/reading"
)

func TestScaled(t *testing.T) {
	for _, tc := range []struct {
		c    rawCount
		want float64
	}{
		{rawCount{Value: 1000, Enabled: 100, Running: 100}, 1000},
		// On the PMU a quarter of the time: extrapolated ×4.
		{rawCount{Value: 1000, Enabled: 400, Running: 100}, 4000},
		{rawCount{Value: 300, Enabled: 3e9, Running: 1e9}, 900},
		// Never scheduled on a counter: no estimate, 0 rather than +Inf.
		{rawCount{Value: 0, Enabled: 500, Running: 0}, 0},
		{rawCount{Value: 7, Enabled: 0, Running: 0}, 0},
		// running > enabled does not happen; never scale down.
		{rawCount{Value: 50, Enabled: 10, Running: 20}, 50},
		// Large counts keep their precision through the ratio.
		{rawCount{Value: 1 << 50, Enabled: 2e9, Running: 1e9}, 1 << 51},
	} {
		if got := tc.c.Scaled(); got != tc.want {
			t.Errorf("%+v.Scaled() = %v, want %v", tc.c, got, tc.want)
		}
	}
}

// fakeOps stands in for perf_event_open: counters are values the test
// sets per (thread, event).
type fakeOps struct {
	t               *testing.T
	unsupported     map[string]error // event name -> open error
	noInheritThread bool
	gone            map[int]bool // tids that answer ESRCH
	next            int
	fds             map[int]fakeFD
	values          map[fakeFD]rawCount
	opens           map[string]int // event name -> open calls
}

type fakeFD struct {
	tid   int
	event string
}

func newFakeOps(t *testing.T) *fakeOps {
	return &fakeOps{
		t:           t,
		unsupported: map[string]error{},
		gone:        map[int]bool{},
		fds:         map[int]fakeFD{},
		values:      map[fakeFD]rawCount{},
		opens:       map[string]int{},
		next:        100,
	}
}

func (f *fakeOps) open(ev reading.PerfEvent, tid int, inheritThread bool) (int, error) {
	f.opens[ev.Name]++
	if err := f.unsupported[ev.Name]; err != nil {
		return -1, err
	}
	if inheritThread && f.noInheritThread {
		return -1, unix.EINVAL
	}
	if f.gone[tid] {
		return -1, unix.ESRCH
	}
	f.next++
	f.fds[f.next] = fakeFD{tid, ev.Name}
	return f.next, nil
}

func (f *fakeOps) read(fd int) (rawCount, error) {
	k, ok := f.fds[fd]
	if !ok {
		f.t.Errorf("read of fd %d that is not open", fd)
		return rawCount{}, unix.EBADF
	}
	return f.values[k], nil
}

func (f *fakeOps) close(fd int) error {
	if _, ok := f.fds[fd]; !ok {
		f.t.Errorf("close of fd %d that is not open", fd)
		return unix.EBADF
	}
	delete(f.fds, fd)
	return nil
}

func (f *fakeOps) set(tid int, event string, value, enabled, running uint64) {
	f.values[fakeFD{tid, event}] = rawCount{value, enabled, running}
}

// fakeProc writes <root>/<pid>/environ and a task entry per thread.
func fakeProc(t *testing.T, root string, pid int, environ string, tids ...int) reading.ProcessUsage {
	t.Helper()
	dir := filepath.Join(root, strconv.Itoa(pid))
	for _, tid := range append([]int{pid}, tids...) {
		if err := os.MkdirAll(filepath.Join(dir, "task", strconv.Itoa(tid)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "environ"), []byte(environ), 0o644); err != nil {
		t.Fatal(err)
	}
	return reading.ProcessUsage{Key: reading.ProcKey{PID: uint32(pid), StartTime: uint64(pid) * 10}, Comm: fmt.Sprint("p", pid), Cgroup: uint64(pid) + 1000, CPU: -1, Alive: true}
}

func newFake(t *testing.T, ops *fakeOps, cfg Config) *Profiler {
	t.Helper()
	if cfg.EnvVars == nil {
		cfg.EnvVars = []string{DefaultEnvVar}
	}
	p, err := newProfiler(cfg, ops)
	if err != nil {
		t.Fatalf("new profiler: %v", err)
	}
	return p
}

func TestScanOptInAndExit(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	ops.unsupported["cpu_cycles"] = unix.ENOENT // a VM without a PMU
	p := newFake(t, ops, Config{
		ProcfsRoot: root,
		Hardware:   []string{"cpu_cycles"},
		Software:   []string{"task_clock", "context_switches"},
	})
	if got := p.Unavailable()["cpu_cycles"]; got != unix.ENOENT.Error() {
		t.Errorf("cpu_cycles unavailable reason %q, want ENOENT's", got)
	}

	in := fakeProc(t, root, 10, "PATH=/bin\x00WATTRACE_PROFILE=1\x00", 11, 12)
	out := fakeProc(t, root, 20, "PATH=/bin\x00WATTRACE_PROFILE=\x00", 21)
	other := fakeProc(t, root, 30, "PATH=/bin\x00")
	procs := []reading.ProcessUsage{in, out, other}
	if exited := p.Scan(procs); len(exited) != 0 {
		t.Fatalf("exited %+v", exited)
	}
	// Three threads × two usable events.
	if st := p.Stats(); st.Profiled != 1 || st.FDs != 6 || len(ops.fds) != 6 {
		t.Fatalf("stats %+v with %d fake fds, want 1 process and 6 fds", st, len(ops.fds))
	}
	ops.set(10, "task_clock", 100, 1, 1)
	ops.set(11, "task_clock", 200, 1, 1)
	ops.set(12, "task_clock", 300, 1, 1)
	// Multiplexed: a quarter of the time on the PMU.
	ops.set(11, "context_switches", 5, 4, 1)

	got := p.Read()
	if len(got) != 1 || got[0].Key != in.Key || got[0].Cgroup != 1010 || got[0].Comm != "p10" || !got[0].Alive {
		t.Fatalf("Read = %+v, want process 10 alone", got)
	}
	want := map[string]float64{"task_clock": 600, "context_switches": 20}
	if fmt.Sprint(got[0].Counts) != fmt.Sprint(want) {
		t.Errorf("counts %v, want %v", got[0].Counts, want)
	}

	// Repeated scans neither re-read environments into new counters nor
	// retry the unavailable event.
	for range 3 {
		p.Scan(procs)
	}
	if n := ops.opens["cpu_cycles"]; n != 1 {
		t.Errorf("cpu_cycles opened %d times, want once (the start-up probe)", n)
	}
	if n := ops.opens["task_clock"]; n != 1+3 {
		t.Errorf("task_clock opened %d times, want probe + 3 threads", n)
	}

	// The process moves cgroup, then exits: absent from the next list.
	procs[0].Cgroup = 4242
	p.Scan(procs)
	ops.set(10, "task_clock", 150, 1, 1)
	exited := p.Scan(procs[1:])
	if len(exited) != 1 || exited[0].Key != in.Key || exited[0].Alive || exited[0].Cgroup != 4242 {
		t.Fatalf("exited = %+v, want process 10's final counts in cgroup 4242", exited)
	}
	want = map[string]float64{"task_clock": 650, "context_switches": 20}
	if fmt.Sprint(exited[0].Counts) != fmt.Sprint(want) {
		t.Errorf("final counts %v, want %v", exited[0].Counts, want)
	}
	if len(ops.fds) != 0 || p.Stats().FDs != 0 || len(p.Read()) != 0 {
		t.Errorf("after exit: %d fake fds, stats %+v, Read %+v", len(ops.fds), p.Stats(), p.Read())
	}
	if again := p.Scan(procs[1:]); len(again) != 0 {
		t.Errorf("final counts returned twice: %+v", again)
	}
}

func TestScanAliveFalseIsFinal(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock"}})
	pr := fakeProc(t, root, 10, "WATTRACE_PROFILE=on")
	p.Scan([]reading.ProcessUsage{pr})
	ops.set(10, "task_clock", 42, 1, 1)
	pr.Alive = false // the source's one read with the final totals
	exited := p.Scan([]reading.ProcessUsage{pr})
	if len(exited) != 1 || exited[0].Counts["task_clock"] != 42 {
		t.Fatalf("exited = %+v, want task_clock 42", exited)
	}
	if len(ops.fds) != 0 {
		t.Errorf("%d fds left open", len(ops.fds))
	}
}

func TestLimits(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock", "page_faults"}, MaxProcesses: 2, MaxFDs: 7})
	a := fakeProc(t, root, 10, "WATTRACE_PROFILE=1")
	b := fakeProc(t, root, 20, "WATTRACE_PROFILE=1", 21)
	c := fakeProc(t, root, 30, "WATTRACE_PROFILE=1")
	big := fakeProc(t, root, 40, "WATTRACE_PROFILE=1", 41, 42)

	p.Scan([]reading.ProcessUsage{a, b, c})
	p.Scan([]reading.ProcessUsage{a, b, c})
	st := p.Stats()
	if st.Profiled != 2 || st.FDs != 6 || st.Waiting != 1 || st.Skipped != 1 {
		t.Fatalf("stats %+v, want 2 processes, 6 fds, 1 waiting and skipped once over two scans", st)
	}
	// a exits: c, still opted in, takes its slot.
	p.Scan([]reading.ProcessUsage{b, c})
	if st := p.Stats(); st.Profiled != 2 || st.FDs != 6 || st.Waiting != 0 {
		t.Fatalf("after a slot freed: %+v, want b and c, none waiting", st)
	}
	// b exits; big needs 3 threads × 2 events = 6 fds, but only 5 are left.
	p.Scan([]reading.ProcessUsage{c, big})
	st = p.Stats()
	if st.Profiled != 1 || st.FDs != 2 || st.Waiting != 1 || st.Skipped != 2 {
		t.Fatalf("stats %+v, want c alone (big over the fd limit), 2 skipped", st)
	}
}

func TestGoneThreadsAndProcesses(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock"}})
	pr := fakeProc(t, root, 10, "WATTRACE_PROFILE=1", 11)
	ops.gone[11] = true // exits between the task listing and the open
	p.Scan([]reading.ProcessUsage{pr})
	if st := p.Stats(); st.Profiled != 1 || st.FDs != 1 {
		t.Fatalf("stats %+v, want the leader's counter only", st)
	}
	// A process that vanished before its environment was read is not
	// remembered as opted out: a source can list it once more.
	ghost := reading.ProcessUsage{Key: reading.ProcKey{PID: 99}, Alive: true}
	p.Scan([]reading.ProcessUsage{pr, ghost})
	if _, ok := p.optIn[ghost.Key]; ok {
		t.Error("vanished process's decision cached")
	}
}

// Without inherit_thread, each scan opens counters on new threads and
// folds exited threads' final counts into the process.
func TestPerThreadRescan(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	ops.noInheritThread = true
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock"}})
	if p.Stats().InheritThread {
		t.Fatal("InheritThread true on a kernel that rejects it")
	}
	pr := fakeProc(t, root, 10, "WATTRACE_PROFILE=1", 11)
	p.Scan([]reading.ProcessUsage{pr})
	ops.set(10, "task_clock", 10, 1, 1)
	ops.set(11, "task_clock", 20, 1, 1)

	// Thread 12 appears, thread 11 exits.
	if err := os.MkdirAll(filepath.Join(root, "10", "task", "12"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(root, "10", "task", "11")); err != nil {
		t.Fatal(err)
	}
	ops.set(12, "task_clock", 5, 1, 1)
	p.Scan([]reading.ProcessUsage{pr})
	if st := p.Stats(); st.FDs != 2 || len(ops.fds) != 2 {
		t.Fatalf("stats %+v, want threads 10 and 12 open", st)
	}
	if got := p.Read()[0].Counts["task_clock"]; got != 35 {
		t.Errorf("task_clock %v, want 10 + 20 (thread 11, folded) + 5", got)
	}
}

func TestNewErrors(t *testing.T) {
	ops := newFakeOps(t)
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"no env var", Config{Software: []string{"task_clock"}, EnvVars: []string{}}},
		{"bad env var", Config{Software: []string{"task_clock"}, EnvVars: []string{"A=B"}}},
		{"no events", Config{EnvVars: []string{"X"}}},
		{"unknown event", Config{EnvVars: []string{"X"}, Software: []string{"task_clocks"}}},
		{"negative limit", Config{EnvVars: []string{"X"}, Software: []string{"task_clock"}, MaxProcesses: -1}},
	} {
		if _, err := newProfiler(tc.cfg, ops); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}

	ops.unsupported["cpu_cycles"] = unix.ENOENT
	_, err := newProfiler(Config{EnvVars: []string{"X"}, Hardware: []string{"cpu_cycles"}}, ops)
	if err == nil {
		t.Fatal("no error when no event can be counted")
	}
	t.Log(err)

	ops.unsupported["task_clock"] = unix.EACCES
	if _, err := newProfiler(Config{EnvVars: []string{"X"}, Software: []string{"task_clock"}}, ops); err == nil {
		t.Fatal("no error when perf_event_open is not permitted")
	}
}

func TestClose(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock", "cpu_clock"}})
	pr := fakeProc(t, root, 10, "WATTRACE_PROFILE=1", 11)
	p.Scan([]reading.ProcessUsage{pr})
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if len(ops.fds) != 0 {
		t.Errorf("%d fds open after Close", len(ops.fds))
	}
	if got := p.Scan([]reading.ProcessUsage{pr}); got != nil || len(p.Read()) != 0 {
		t.Error("closed profiler still scans")
	}
}

// A process scanned between fork and exec shows its parent's environment,
// and one scanned during exec an empty one; neither may stick once it has
// exec'd the job with the variable set.
func TestOptInAfterExec(t *testing.T) {
	root := t.TempDir()
	ops := newFakeOps(t)
	p := newFake(t, ops, Config{ProcfsRoot: root, Software: []string{"task_clock"}})
	pr := fakeProc(t, root, 10, "PATH=/bin\x00")
	pr.Comm = "slurmstepd"
	p.Scan([]reading.ProcessUsage{pr})
	if p.Stats().Profiled != 0 {
		t.Fatal("process without the variable profiled")
	}
	// Mid-exec: the new image's environment is not there yet.
	pr.Comm = "app"
	fakeProc(t, root, 10, "")
	p.Scan([]reading.ProcessUsage{pr})
	if p.Stats().Profiled != 0 {
		t.Fatal("process with an empty environment profiled")
	}
	fakeProc(t, root, 10, "WATTRACE_PROFILE=1\x00")
	p.Scan([]reading.ProcessUsage{pr})
	if p.Stats().Profiled != 1 {
		t.Fatal("process not profiled after exec set the variable")
	}

	// Same comm, no empty read in between: the first decision stands, and
	// the environment is not read again.
	other := fakeProc(t, root, 20, "PATH=/bin\x00")
	p.Scan([]reading.ProcessUsage{pr, other})
	fakeProc(t, root, 20, "WATTRACE_PROFILE=1\x00")
	p.Scan([]reading.ProcessUsage{pr, other})
	if p.Stats().Profiled != 1 {
		t.Error("cached decision re-read without a comm change")
	}
}
