package bpfloader

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

func scopeForTest(t testing.TB, a *Accounting, dir string) *Scope {
	t.Helper()
	if !a.CanScope() {
		testenv.Need(t, "%v", ErrNoScope)
	}
	s, err := a.Scope(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// busyFor starts this test binary burning CPU for d in cgroup dir.
func busyFor(t testing.TB, dir string, d time.Duration) *exec.Cmd {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$1"`, dir, self)
	cmd.Env = append(os.Environ(), busyEnv+"="+d.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testenv.Kill(cmd) })
	return cmd
}

// kernelNs is the kernel's own CPU time of the cgroup at dir and its
// descendants, in ns (cgroup2 keeps microseconds).
func kernelNs(t testing.TB, h cgroup.Hierarchy, res *cgroup.Resolver, dir string) uint64 {
	t.Helper()
	return cgUsage(t, res, h, dir)
}

// settledScope reads s until two reads in a row agree and the figure has
// caught up with the kernel's own (the last slices of the ended tasks are
// claimed at their last context switch and at their free).
func settledScope(t *testing.T, s *Scope, kernel func() uint64) (got, want uint64) {
	t.Helper()
	var last uint64
	for deadline := time.Now().Add(5 * time.Second); ; {
		u, err := s.Read()
		if err != nil {
			t.Fatal(err)
		}
		k := kernel()
		if u.CPUNs == last && u.CPUNs+1000 >= k || time.Now().After(deadline) {
			return u.CPUNs, k
		}
		last = u.CPUNs
		time.Sleep(20 * time.Millisecond)
	}
}

// A scoped read counts what the cgroup's tasks and its descendants' ran,
// and nothing else the node runs: a burner in the cgroup, one in a
// sub-cgroup, one in a sub-cgroup removed before the last read, a hundred
// short-lived processes, and a burner in another cgroup beside it. After
// they end, the figure is the kernel's own charge to the cgroup, to the
// microsecond.
func TestScopeReadsOnlyItsCgroup(t *testing.T) {
	a, h, res := loadForTest(t)
	dir := testenv.Cgroup(t, h.Mount, "scope")
	other := testenv.Cgroup(t, h.Mount, "other")
	sub := testenv.Mkdir(t, filepath.Join(dir, "sub"))
	gone := testenv.Mkdir(t, filepath.Join(dir, "gone"))
	s := scopeForTest(t, a, dir)

	u, err := s.Read()
	if err != nil {
		t.Fatal(err)
	}
	if u.ID != testenv.Inode(t, dir) || u.CPUNs != 0 {
		t.Fatalf("empty cgroup: %+v, want id %d and no CPU", u, testenv.Inode(t, dir))
	}
	k0 := kernelNs(t, h, res, dir)
	o0 := kernelNs(t, h, res, other)
	procs := []*exec.Cmd{
		busyFor(t, other, 600*time.Millisecond),
		busyFor(t, dir, 400*time.Millisecond),
		busyFor(t, sub, 300*time.Millisecond),
		busyFor(t, gone, 200*time.Millisecond),
	}
	short := exec.Command("/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done`, dir)
	if err := short.Start(); err != nil {
		t.Fatal(err)
	}
	procs = append(procs, short)
	// Reads while they run: each claims what ran so far.
	for i := 0; i < 5; i++ {
		time.Sleep(50 * time.Millisecond)
		if _, err := s.Read(); err != nil {
			t.Fatal(err)
		}
	}
	if err := procs[3].Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(); err != nil {
		t.Fatal(err)
	}
	// The sub-cgroup goes, with what it ran.
	for deadline := time.Now().Add(5 * time.Second); ; {
		err := syscall.Rmdir(gone)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("remove %s: %v", gone, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, p := range procs {
		if p.ProcessState == nil {
			if err := p.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, k1 := settledScope(t, s, func() uint64 { return kernelNs(t, h, res, dir) })
	want := k1 - k0
	t.Logf("scope %d ns, kernel %d ns (the other cgroup: %d ns)", got, want, kernelNs(t, h, res, other)-o0)
	if want < 100e6 {
		t.Fatalf("the kernel charged the cgroup %d ns: the burners did not run", want)
	}
	if d := int64(got) - int64(want); d < -1000 || d > 1000 {
		t.Errorf("scope %d ns, kernel %d ns: %+d ns off, want within 1 µs", got, want, d)
	}
}

// What a scoped read claims goes to the cgroup's exit-map entry, so a
// read of the node after it still counts the cgroup whole; Close deletes
// the entries of the cgroups it saw.
func TestScopeThenNodeRead(t *testing.T) {
	a, h, res := loadForTest(t)
	dir := testenv.Cgroup(t, h.Mount, "scope-node")
	id := testenv.Inode(t, dir)
	s := scopeForTest(t, a, dir)
	r0, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	k0 := kernelNs(t, h, res, dir)
	p := busyFor(t, dir, 300*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	if _, err := s.Read(); err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	got, k1 := settledScope(t, s, func() uint64 { return kernelNs(t, h, res, dir) })
	r1, err := a.Read()
	if err != nil {
		t.Fatal(err)
	}
	node := findCgroup(r1, id).CPUNs - findCgroup(r0, id).CPUNs
	t.Logf("scope %d ns, node read %d ns, kernel %d ns", got, node, k1-k0)
	if node != got {
		t.Errorf("node read %d ns, scoped read %d ns: want the same", node, got)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var c accountingCounters
	if err := a.objs.ExitedCgroups.Lookup(id, &c); err == nil {
		t.Errorf("exit-map entry of %d left after Close: %+v", id, c)
	}
	if _, err := s.Read(); err == nil {
		t.Error("read after Close succeeded")
	}
}

// crowd starts n sleeping processes in a cgroup of their own and waits
// until they are all there.
func crowd(b *testing.B, mount string, n int) {
	b.Helper()
	dir := testenv.Cgroup(b, mount, "crowd")
	script := `echo $$ > "$0/cgroup.procs" && i=0; while [ $i -lt ` + strconv.Itoa(n) + ` ]; do sleep 3600 & i=$((i+1)); done; exec sleep 3600`
	cmd := exec.Command("/bin/sh", "-c", script, dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { testenv.Kill(cmd) })
	for deadline := time.Now().Add(5 * time.Minute); ; {
		data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			b.Fatal(err)
		}
		if len(strings.Fields(string(data))) >= n+1 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("%d processes in %s after 5 min, want %d", len(strings.Fields(string(data))), dir, n+1)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// BenchmarkScopedRead is one read of a cgroup holding one process, scoped
// against the node's read, with WATTRACE_BENCH_TASKS (default 10,000)
// sleeping processes elsewhere on the node: what a `wattrace measure` run
// reads per run either way.
func BenchmarkScopedRead(b *testing.B) {
	n := 10000
	if v := os.Getenv("WATTRACE_BENCH_TASKS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatalf("WATTRACE_BENCH_TASKS=%q: %v", v, err)
		}
	}
	a, h, _ := loadForTest(b)
	crowd(b, h.Mount, n)
	dir := testenv.Cgroup(b, h.Mount, "scoped")
	testenv.StartIn(b, dir, "sleep", "3600")
	s := scopeForTest(b, a, dir)
	b.Run("node", func(b *testing.B) {
		if _, err := a.Read(); err != nil {
			b.Fatal(err)
		}
		procs := 0
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			r, err := a.Read()
			if err != nil {
				b.Fatal(err)
			}
			procs = len(r.Processes)
		}
		b.ReportMetric(float64(procs), "processes")
	})
	b.Run("cgroup", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := s.Read(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// refuseScope makes the kernel refuse dump_cgroup, as one without the
// css_task iterator in iterator programs (before Linux 6.7) does.
func refuseScope(spec *ebpf.CollectionSpec) {
	// An exit with R0 never set: the verifier rejects it.
	spec.Programs[accountingProgDumpCgroup].Instructions = asm.Instructions{asm.Return()}
}

// A kernel that refuses the scoped read still gets the accounting: the
// other programs load without it, Scope says ErrNoScope, and the node
// reads count as before. Kept so, the copy is reused by the next
// process, not replaced at every start for lacking the program.
func TestAccountingWithoutTheScopedRead(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "/sys/fs/cgroup", "auto")
	if err != nil {
		t.Fatal(err)
	}
	root := testenv.BPFFS(t)
	for i, want := range []string{KeptPinned, KeptReused} {
		a, err := Load(Options{Hierarchy: h, Keep: root, editSpec: refuseScope})
		if err != nil {
			t.Fatalf("load %d: %v", i, err)
		}
		if got := a.Kept().How; got != want {
			t.Errorf("load %d: programs %q, want %q", i, got, want)
		}
		if a.CanScope() {
			t.Errorf("load %d: the refused program is there", i)
		}
		if _, err := a.Scope(h.Mount); !errors.Is(err, ErrNoScope) {
			t.Errorf("load %d: Scope: %v, want ErrNoScope", i, err)
		}
		res := cgroup.NewResolver(h)
		exactShortProcesses(t, a, h, res, "noscope", 20)
		a.Close()
	}
}

// A Scope reads a cgroup of the hierarchy that keys the accounting, whose
// ids the exit hooks credit; another hierarchy's is refused.
func TestScopeOfAnotherHierarchyRefused(t *testing.T) {
	a, h, _ := loadForTest(t)
	if !a.CanScope() {
		testenv.Need(t, "%v", ErrNoScope)
	}
	other := "/sys/fs/cgroup/unified"
	if h.Kind == cgroup.V2 {
		other = "/sys/fs/cgroup/cpuacct"
	}
	if _, err := os.Stat(other); err != nil {
		testenv.NotApplicable(t, "no second hierarchy at %s", other)
	}
	if s, err := a.Scope(other); err == nil || !strings.Contains(err.Error(), "keys the accounting") {
		if s != nil {
			s.Close()
		}
		t.Errorf("Scope(%s) with the %s hierarchy at %s: %v, want refused", other, h.Kind, h.Mount, err)
	}
}
