package procfs

import (
	"path/filepath"
	"strconv"
	"testing"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

func newFixtureSource(t *testing.T) (fixture, *Source) {
	t.Helper()
	dir := copyTree(t, "testdata/fixture")
	f := fixture{t: t, dir: dir, proc: filepath.Join(dir, "proc"), cg: filepath.Join(dir, "cpuacct")}
	src, err := New(Options{ProcfsRoot: f.proc, Hierarchy: cgroup.Hierarchy{Kind: cgroup.CPUAcct, Mount: f.cg}, CPUs: 2})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { src.Close() })
	stepClock(src)
	return f, src
}

func mustRead(t *testing.T, src *Source, step string) map[uint64]reading.CgroupUsage {
	t.Helper()
	r, err := src.Read()
	if err != nil {
		t.Fatalf("%s: %v", step, err)
	}
	return byID(r)
}

// A child whose counter cannot be parsed for a while must not hand its
// history to the parent (issue: "/" went from 2.38 to 9.48 s and stayed):
// the parent is held, and both resume exactly from their next good reading.
func TestUnreadableChildDoesNotLeakIntoParent(t *testing.T) {
	f, src := newFixtureSource(t)
	root, a := f.ino("."), f.ino("a")
	got := mustRead(t, src, "read 1")
	if got[root].CPUNs != 300*ms || got[a].CPUNs != 350*ms {
		t.Fatalf("read 1: %+v", got)
	}
	for i, rootUsage := range []string{"1500000000\n", "1600000000\n"} {
		f.write("cpuacct/cpuacct.usage", rootUsage)
		f.write("cpuacct/a/cpuacct.usage", "xyz\n")
		got = mustRead(t, src, "garbage")
		if got[root].CPUNs != 300*ms || got[a].CPUNs != 350*ms {
			t.Fatalf("garbage read %d: root %d a %d, want both held at 300/350 ms", i, got[root].CPUNs, got[a].CPUNs)
		}
	}
	f.write("cpuacct/cpuacct.usage", "1700000000\n")
	f.write("cpuacct/a/cpuacct.usage", "1150000000\n")
	got = mustRead(t, src, "recovered")
	// root: 1700 − a 1150 − c 100 = 450; a: 1150 − b 250 = 900.
	if got[root].CPUNs != 450*ms || got[a].CPUNs != 900*ms {
		t.Fatalf("recovered: root %d a %d, want 450/900 ms", got[root].CPUNs, got[a].CPUNs)
	}
	h := src.Health()
	if len(h) != 1 || h[0].Rejected["unreadable"] != 2 || !h[0].Up {
		t.Fatalf("health %+v, want 2 unreadable readings and up", h)
	}
}

// One read of UINT64_MAX must not set a cgroup's CPU to 1.8e10 s forever.
func TestHugeCounterRejected(t *testing.T) {
	f, src := newFixtureSource(t)
	root, a, b := f.ino("."), f.ino("a"), f.ino("a/b")
	mustRead(t, src, "read 1")
	f.write("cpuacct/a/b/cpuacct.usage", "18446744073709551615\n")
	got := mustRead(t, src, "huge")
	if got[b].CPUNs != 250*ms || got[a].CPUNs != 350*ms || got[root].CPUNs != 300*ms {
		t.Fatalf("huge read credited: %+v", got)
	}
	f.write("cpuacct/a/b/cpuacct.usage", "400000000\n")
	f.write("cpuacct/a/cpuacct.usage", "750000000\n")
	f.write("cpuacct/cpuacct.usage", "1150000000\n")
	got = mustRead(t, src, "after")
	// b: 400 (+150, nothing lost across the glitch); a: 750 − 400 = 350;
	// root: 1150 − 750 − 100 = 300.
	if got[b].CPUNs != 400*ms || got[a].CPUNs != 350*ms || got[root].CPUNs != 300*ms {
		t.Fatalf("after the glitch: b %d a %d root %d", got[b].CPUNs, got[a].CPUNs, got[root].CPUNs)
	}
	if n := src.Health()[0].Rejected["too_fast"]; n != 1 {
		t.Fatalf("too_fast rejections %d, want 1", n)
	}
}

// A process whose utime+stime jumps beyond what 2 CPUs can run in 5 s is
// not credited; it resumes from its next plausible reading.
func TestProcessJumpRejected(t *testing.T) {
	f, src := newFixtureSource(t)
	k100 := reading.ProcKey{PID: 100, StartTime: 1000}
	if _, err := src.Read(); err != nil {
		t.Fatal(err)
	}
	f.write("proc/100/stat", stat("100", "busy (x)", "900000", "25", "1", "1000", "1"))
	r, _ := src.Read()
	if p := byKey(r)[k100]; p.CPUNs != 750*ms {
		t.Fatalf("jump credited: %d", p.CPUNs)
	}
	f.write("proc/100/stat", stat("100", "busy (x)", "60", "25", "1", "1000", "1"))
	r, _ = src.Read()
	if p := byKey(r)[k100]; p.CPUNs != 850*ms {
		t.Fatalf("after the jump: %d, want 850 ms", p.CPUNs)
	}
}

// Property: whatever a child's counter reads (garbage, a huge value, a step
// back, a missing file), no exported cgroup counter decreases, the parent
// never absorbs the child's usage, and once both read well again both are
// exactly right.
func TestCgroupCountersProperty(t *testing.T) {
	f, src := newFixtureSource(t)
	root, c := f.ino("."), f.ino("c")
	rnd := uint64(12345)
	next := func(n uint64) uint64 { rnd = rnd*6364136223846793005 + 1442695040888963407; return (rnd >> 33) % n }
	// Fixture: root's own 300 ms, a (with b) 600 ms, c 100 ms; a stays.
	rootSelf, cUse := uint64(300*ms), uint64(100*ms)
	mustRead(t, src, "read 1")
	prev := map[uint64]uint64{}
	prevGood, lastGood := true, cUse
	for i := 0; i < 300; i++ {
		rootSelf += next(2000) * ms
		cUse += next(8000) * ms // up to 8 s in 5 s on 2 CPUs: plausible
		f.write("cpuacct/cpuacct.usage", itoa(rootSelf+600*ms+cUse))
		good := true
		switch next(8) {
		case 0:
			f.write("cpuacct/c/cpuacct.usage", "xyz\n")
			good = false
		case 1:
			f.write("cpuacct/c/cpuacct.usage", "18446744073709551615\n")
			good = false
		case 2:
			// A step back below the last good reading (a forward value
			// that is merely too low cannot be told from a good one).
			f.write("cpuacct/c/cpuacct.usage", itoa(lastGood/2))
			good = false
		default:
			f.write("cpuacct/c/cpuacct.usage", itoa(cUse))
			lastGood = cUse
		}
		got := mustRead(t, src, "property")
		for id, cg := range got {
			if cg.CPUNs < prev[id] {
				t.Fatalf("step %d: cgroup %d went back %d → %d", i, id, prev[id], cg.CPUNs)
			}
			prev[id] = cg.CPUNs
		}
		if got[root].CPUNs > rootSelf || got[c].CPUNs > cUse {
			t.Fatalf("step %d: root %d > %d or c %d > %d: usage invented", i, got[root].CPUNs, rootSelf, got[c].CPUNs, cUse)
		}
		if good && prevGood && (got[root].CPUNs != rootSelf || got[c].CPUNs != cUse) {
			t.Fatalf("step %d: good readings not credited: root %d want %d, c %d want %d", i, got[root].CPUNs, rootSelf, got[c].CPUNs, cUse)
		}
		prevGood = good
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) + "\n" }
