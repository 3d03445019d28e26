package procfs

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// procTicksNs reads utime+stime of pid from the real /proc, in ns.
func procTicksNs(t *testing.T, pid int) uint64 {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	ut, _ := strconv.ParseUint(f[11], 10, 64)
	st, _ := strconv.ParseUint(f[12], 10, 64)
	return (ut + st) * nsPerTick
}

func within(got, want, tol uint64) bool {
	if got > want {
		return got-want <= tol
	}
	return want-got <= tol
}

func TestHost(t *testing.T) {
	testenv.RequireRoot(t)
	h, err := cgroup.Detect("/proc", "", "auto")
	if err != nil {
		t.Fatalf("Detect: %v", err)
	}
	res := cgroup.NewResolver(h)
	top := testenv.TempDir(t, h.Mount)
	dirA := testenv.Mkdir(t, filepath.Join(top, "A"))
	dirB := testenv.Mkdir(t, filepath.Join(top, "B"))
	relA, relB := "/"+filepath.Base(top)+"/A", "/"+filepath.Base(top)+"/B"
	idA, err := res.ID(relA)
	if err != nil {
		t.Fatal(err)
	}
	idB, err := res.ID(relB)
	if err != nil {
		t.Fatal(err)
	}

	busy := testenv.Spawn(t, dirA, "while :; do :; done")
	light := testenv.Spawn(t, dirB, "while :; do i=0; while [ $i -lt 300 ]; do i=$((i+1)); done; sleep 0.01; done")

	src, err := New(Options{Resolver: res})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer src.Close()
	exact := h.Kind != cgroup.CPU

	// cgroupUsage reads the cgroups' own counters just after each Read, so
	// both sides of the comparison are skewed alike and deltas cancel.
	cgroupUsage := func() (uint64, uint64) {
		if !exact {
			return 0, 0
		}
		a, err := res.Usage(relA)
		if err != nil {
			t.Fatal(err)
		}
		b, err := res.Usage(relB)
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
	time.Sleep(200 * time.Millisecond)
	r0, err := src.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	uA0, uB0 := cgroupUsage()
	// The window runs until the busy process has had 2 s of CPU (3 s on a
	// quiet machine; up to 30 s where other work starves it), so the checks
	// below compare figures large against a tick, however loaded the
	// machine is.
	b0 := procTicksNs(t, busy.Process.Pid)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		time.Sleep(250 * time.Millisecond)
		if procTicksNs(t, busy.Process.Pid)-b0 >= uint64(2*time.Second)+20*ms {
			break
		}
	}
	r1, err := src.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	uA1, uB1 := cgroupUsage()
	busyNs, lightNs := procTicksNs(t, busy.Process.Pid), procTicksNs(t, light.Process.Pid)

	c0, c1 := byID(r0), byID(r1)
	dA, dB := c1[idA].CPUNs-c0[idA].CPUNs, c1[idB].CPUNs-c0[idB].CPUNs
	t.Logf("A: source %v cgroupfs %v; B: source %v cgroupfs %v", time.Duration(dA), time.Duration(uA1-uA0), time.Duration(dB), time.Duration(uB1-uB0))
	if dA < uint64(2*time.Second) {
		t.Errorf("busy cgroup A used only %v, its process %v", time.Duration(dA), time.Duration(procTicksNs(t, busy.Process.Pid)-b0))
	}
	if dB == 0 || dB >= dA {
		t.Errorf("light cgroup B used %v, busy A %v", time.Duration(dB), time.Duration(dA))
	}
	if exact {
		if tol := (uA1-uA0)*3/100 + 5*ms; !within(dA, uA1-uA0, tol) {
			t.Errorf("A: source delta %v, cpuacct delta %v", time.Duration(dA), time.Duration(uA1-uA0))
		}
		if tol := (uB1-uB0)*3/100 + 5*ms; !within(dB, uB1-uB0, tol) {
			t.Errorf("B: source delta %v, cpuacct delta %v", time.Duration(dB), time.Duration(uB1-uB0))
		}
	}
	if c1[idB].Switches <= c0[idB].Switches {
		t.Errorf("B's switches did not grow: %d → %d", c0[idB].Switches, c1[idB].Switches)
	}

	p1 := byKey(r1)
	for _, c := range []struct {
		pid  int
		cg   uint64
		want uint64
	}{{busy.Process.Pid, idA, busyNs}, {light.Process.Pid, idB, lightNs}} {
		var p reading.ProcessUsage
		for _, q := range p1 {
			if int(q.Key.PID) == c.pid {
				p = q
			}
		}
		if !p.Alive || p.Cgroup != c.cg || p.Comm != "sh" {
			t.Errorf("pid %d: %+v, want alive sh in cgroup %d", c.pid, p, c.cg)
		}
		if tol := nsPerTick + c.want*2/100; !within(p.CPUNs, c.want, tol) {
			t.Errorf("pid %d: CPUNs %v, /proc stat %v", c.pid, time.Duration(p.CPUNs), time.Duration(c.want))
		}
	}

	checkMonotonic(t, r0, r1)
	checkKilledOnce(t, src, dirA, idA)

}

// checkMonotonic: no process's and no cgroup's counters went back from r0
// to r1.
func checkMonotonic(t *testing.T, r0, r1 reading.Usage) {
	t.Helper()
	p1, c0, c1 := byKey(r1), byID(r0), byID(r1)
	for k, p := range byKey(r0) {
		if q, ok := p1[k]; ok && (q.CPUNs < p.CPUNs || q.Switches < p.Switches) {
			t.Errorf("process %+v went back: %+v → %+v", k, p, q)
		}
	}
	for id, c := range c0 {
		if d, ok := c1[id]; ok && (d.CPUNs < c.CPUNs || d.Switches < c.Switches) {
			t.Errorf("cgroup %d went back: %+v → %+v", id, c, d)
		}
	}

}

// checkKilledOnce: a process killed in dir (cgroup id) is reported once
// with Alive=false, then forgotten.
func checkKilledOnce(t *testing.T, src *Source, dir string, id uint64) {
	t.Helper()
	victim := testenv.Spawn(t, dir, "exec sleep 100")
	pid := uint32(victim.Process.Pid)
	find := func(r reading.Usage) []reading.ProcessUsage {
		var out []reading.ProcessUsage
		for _, p := range r.Processes {
			if p.Key.PID == pid {
				out = append(out, p)
			}
		}
		return out
	}
	r, err := src.Read()
	if err != nil {
		t.Fatal(err)
	}
	if ps := find(r); len(ps) != 1 || !ps[0].Alive || ps[0].Cgroup != id {
		t.Fatalf("victim before kill: %+v", ps)
	}
	testenv.Kill(victim)
	if r, err = src.Read(); err != nil {
		t.Fatal(err)
	}
	if ps := find(r); len(ps) != 1 || ps[0].Alive {
		t.Fatalf("victim after kill: %+v, want one report with Alive=false", ps)
	}
	if r, err = src.Read(); err != nil {
		t.Fatal(err)
	}
	if ps := find(r); len(ps) != 0 {
		t.Fatalf("victim still reported: %+v", ps)
	}
}
