package measure

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// nodeRead is an accounting whose node read must not happen.
type nodeRead struct{ t *testing.T }

func (n nodeRead) Read() (reading.Usage, error) {
	n.t.Error("a run read the node's accounting")
	return reading.Usage{}, errors.New("node read")
}
func (nodeRead) Mode() string { return "bpf" }

// fakeScope replays a cgroup's CPU time, read after read (the last one
// again once they run out).
type fakeScope struct {
	dir    string
	reads  []uint64
	n      int
	closed bool
}

func (f *fakeScope) Read() (reading.CgroupUsage, error) {
	v := f.reads[min(f.n, len(f.reads)-1)]
	f.n++
	return reading.CgroupUsage{CPUNs: v}, nil
}

func (f *fakeScope) Close() error { f.closed = true; return nil }

// A run in a child cgroup read alone (Env.Scope): the node's accounting
// is never read; the new cgroup's start is taken as zero, unread; the
// command's CPU time is its cgroup's once it stops moving; the node's is
// the root's growth from the start to the end read, plus what the
// command was charged after the end read; the cgroup's read is closed
// with the run.
func TestScopedRunReadsItsCgroupAlone(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "v2")
	if err != nil {
		needCgroup2(t, err)
	}
	parent := testenv.Cgroup(t, h.Mount, "scoped")
	sc := &fakeScope{reads: []uint64{300_000, 350_000, 400_000}}
	node := []uint64{1_000_000, 5_000_000}
	nodeReads := 0
	e := &Env{Meter: fakeMeter{}, Acct: nodeRead{t}, Settle: time.Second,
		Place: func() (*Placement, error) { return newChild(h, parent) },
		Scope: func(dir string) (CgroupReader, error) {
			sc.dir = dir
			return sc, nil
		},
		NodeNs: func() (uint64, error) {
			if nodeReads >= len(node) {
				t.Errorf("node CPU read %d times, want %d (start and end)", nodeReads+1, len(node))
				return node[len(node)-1], nil
			}
			nodeReads++
			return node[nodeReads-1], nil
		}}
	r, err := e.runOnce(context.Background(), "/bin/true", []string{"true"})
	if err != nil {
		t.Fatal(err)
	}
	if !sc.closed || filepath.Dir(sc.dir) != parent || !strings.HasPrefix(filepath.Base(sc.dir), "wattrace-measure-") {
		t.Errorf("scope of %q (closed %v), want the run's cgroup under %s, closed", sc.dir, sc.closed, parent)
	}
	if r.cmdNs != 400_000 {
		t.Errorf("command CPU %.0f ns, want its cgroup's settled 400000", r.cmdNs)
	}
	if want := 4_000_000.0 + 100_000; r.nodeNs != want {
		t.Errorf("node CPU %.0f ns, want the root's 4000000 and the command's late 100000", r.nodeNs)
	}
	if sc.n < 4 {
		t.Errorf("%d reads of the cgroup, want the end's and settling ones until two agree", sc.n)
	}
}

// Multi-socket nodes place each process's time on its socket, which
// takes the node's read: a Scope is not used there.
func TestMultiSocketRunsReadTheNode(t *testing.T) {
	e := &Env{Acct: nodeRead{t}, NSockets: 2, Scope: func(string) (CgroupReader, error) { return &fakeScope{}, nil },
		NodeNs: func() (uint64, error) { return 0, nil }}
	rd, err := e.runReader(&Placement{How: PlaceChild, Dir: "/nonexistent"})
	if err != nil || rd.scoped || rd.sc != nil {
		t.Errorf("reader %+v (%v), want the node's", rd, err)
	}
	e.NSockets = 1
	if rd, err := e.runReader(&Placement{How: PlaceSystemd, Dir: "/nonexistent"}); err != nil || rd.scoped {
		t.Errorf("systemd scope: reader %+v (%v), want the node's (systemd may remove the cgroup first)", rd, err)
	}
}

// The node's busy CPU is the cpuacct hierarchy's root usage, read only
// where the mount is that root, and checked: a number that never goes
// down.
func TestRootCPUAcct(t *testing.T) {
	proc := t.TempDir()
	root := t.TempDir()
	write := func(path, s string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(proc, "self", "mounts"), "cgroup "+root+" cgroup rw,relatime,cpuacct 0 0\n")
	write(filepath.Join(root, "cpuacct.usage"), "1234567\n")
	if _, _, why := rootCPUAcct(proc); !strings.Contains(why, "not its hierarchy's root") {
		t.Errorf("a mount without cgroup.sane_behavior: %q, want it refused as not the root", why)
	}
	write(filepath.Join(root, "cgroup.sane_behavior"), "0\n")
	read, closeIt, why := rootCPUAcct(proc)
	if why != "" {
		t.Fatal(why)
	}
	defer closeIt()
	if v, err := read(); err != nil || v != 1234567 {
		t.Errorf("read %d, %v; want 1234567", v, err)
	}
	write(filepath.Join(root, "cpuacct.usage"), "1234999\n")
	if v, err := read(); err != nil || v != 1234999 {
		t.Errorf("read %d, %v; want 1234999, read anew", v, err)
	}
	write(filepath.Join(root, "cpuacct.usage"), "1000\n")
	var rej *reading.Rejection
	if _, err := read(); !errors.As(err, &rej) || rej.Reason != reading.Backwards {
		t.Errorf("a counter that went down: %v, want rejected as backwards", err)
	}
	write(filepath.Join(root, "cpuacct.usage"), "x\n")
	if _, err := read(); !errors.As(err, &rej) || rej.Reason != reading.Unreadable {
		t.Errorf("garbage: %v, want rejected as unreadable", err)
	}
	write(filepath.Join(proc, "self", "mounts"), "cgroup2 /sys/fs/cgroup cgroup2 rw 0 0\n")
	if _, _, why := rootCPUAcct(proc); why == "" {
		t.Error("no cpuacct mount, yet a reader")
	}
}

// Where the node has a cpuacct hierarchy and the kernel the cgroup read,
// each run reads its own cgroup alone, and the command's CPU time is
// still the kernel's charge to its cgroup (fork-heavy, as
// TestForkHeavyMatchesKernelAccounting); the node's CPU time is the
// root cpuacct's.
func TestRunsReadTheirCgroup(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, why := rootCPUAcct("/proc"); why != "" {
		testenv.NotApplicable(t, "the node's busy CPU is not to be had exactly here (%s): runs read the node", why)
	}
	parent := testenv.Cgroup(t, h.Mount, "measure-scoped")
	before, _ := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
	sys := fixturePower(t, wattsPerCPU)
	rep, code, _ := jsonReport(t, "--path.sysfs", sys, "--accounting=bpf", "--cgroup=child", "--cgroup.parent", parent, "-r", "3",
		"--", "sh", "-c", "i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done")
	if code != 0 {
		t.Fatalf("status %d, warnings %q", code, rep.Warnings)
	}
	requireBPF(t, rep)
	if rep.CPURead != ReadCgroup {
		t.Fatalf("runs read the %q, want their cgroup (warnings %q)", rep.CPURead, rep.Warnings)
	}
	after, _ := (&Placement{Dir: parent, Kind: h.Kind}).KernelCPU()
	var cmd float64
	for _, r := range rep.Runs {
		cmd += r.CPUSeconds
		if r.NodeCPUSeconds < r.CPUSeconds {
			t.Errorf("run %d: node CPU %.6f s below the command's %.6f s", r.Run, r.NodeCPUSeconds, r.CPUSeconds)
		}
	}
	t.Logf("3 runs of 100 children: BPF %.6f s, kernel %.6f s", cmd, after-before)
	within(t, "CPU of 3 × 100 children vs the kernel's", cmd, after-before, 0.01)
}

// The node's busy CPU for runs read alone agrees with the node's read:
// over a burner, the root cpuacct's usage grows as the sum over every
// cgroup of a read of every task does.
func TestNodeCPUMatchesTheNodeRead(t *testing.T) {
	testenv.RequireRoot(t)
	read, closeIt, why := rootCPUAcct("/proc")
	if why != "" {
		testenv.NotApplicable(t, "the node's busy CPU is not to be had exactly here: %s", why)
	}
	defer closeIt()
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatal(err)
	}
	a, err := bpfloader.Load(bpfloader.Options{Hierarchy: h})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	pair := func() (root, node uint64) {
		t.Helper()
		root, err := read()
		if err != nil {
			t.Fatal(err)
		}
		r, err := a.Read()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Cgroups {
			node += c.CPUNs
		}
		return root, node
	}
	x0, y0 := pair()
	// Long enough that what other work runs between the two reads of a
	// pair (milliseconds, on a busy shared machine) is well under 1%.
	burn := exec.Command("/bin/sh", "-c", "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); done")
	if err := burn.Run(); err != nil {
		t.Fatal(err)
	}
	x1, y1 := pair()
	t.Logf("root cpuacct %d ns, node read %d ns", x1-x0, y1-y0)
	within(t, "root cpuacct vs the node read", float64(x1-x0), float64(y1-y0), 0.01)
}
