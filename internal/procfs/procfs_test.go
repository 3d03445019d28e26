package procfs

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// copyTree copies testdata/fixture into a temporary directory, which the
// test then edits between reads.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatalf("copy %s: %v", src, err)
	}
	return dst
}

type fixture struct {
	t    *testing.T
	dir  string
	proc string
	cg   string
}

func (f fixture) write(rel, content string) {
	f.t.Helper()
	p := filepath.Join(f.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f fixture) remove(rel string) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.dir, rel)); err != nil {
		f.t.Fatal(err)
	}
}

func (f fixture) ino(rel string) uint64 {
	f.t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(f.cg, rel), &st); err != nil {
		f.t.Fatal(err)
	}
	return st.Ino
}

// stepClock makes each read of src happen 5 s after the previous one, as
// the stats loop's reads do: back-to-back reads would make any growth look
// faster than the CPUs can run.
func stepClock(src *Source) *time.Time {
	t := time.Unix(1_700_000_000, 0)
	src.now = func() time.Time {
		t = t.Add(5 * time.Second)
		return t
	}
	return &t
}

// stat renders a /proc/PID/stat line with the fields the source reads.
func stat(pid, comm string, utime, stime, threads, start, cpu string) string {
	return pid + " (" + comm + ") S 1 " + pid + " " + pid + " 0 -1 4194304 101 0 0 0 " + utime + " " + stime +
		" 0 0 20 0 " + threads + " 0 " + start + " 3133440 378 18446744073709551615 1 1 1 0 0 0 0 0 0 0 0 0 17 " +
		cpu + " 0 0 0 0 0\n"
}

func status(vol, nonvol string) string {
	return "Name:\tx\nState:\tS (sleeping)\nvoluntary_ctxt_switches:\t" + vol + "\nnonvoluntary_ctxt_switches:\t" + nonvol + "\n"
}

func byKey(r reading.Usage) map[reading.ProcKey]reading.ProcessUsage {
	m := map[reading.ProcKey]reading.ProcessUsage{}
	for _, p := range r.Processes {
		m[p.Key] = p
	}
	return m
}

func byID(r reading.Usage) map[uint64]reading.CgroupUsage {
	m := map[uint64]reading.CgroupUsage{}
	for _, c := range r.Cgroups {
		m[c.ID] = c
	}
	return m
}

const ms = uint64(time.Millisecond)

func TestFixture(t *testing.T) {
	dir := copyTree(t, "testdata/fixture")
	f := fixture{t: t, dir: dir, proc: filepath.Join(dir, "proc"), cg: filepath.Join(dir, "cpuacct")}
	src, err := New(Options{ProcfsRoot: f.proc, Hierarchy: cgroup.Hierarchy{Kind: cgroup.CPUAcct, Mount: f.cg}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer src.Close()
	stepClock(src)
	if src.Mode() != "procfs" {
		t.Errorf("Mode = %q", src.Mode())
	}
	root, a, b, c := f.ino("."), f.ino("a"), f.ino("a/b"), f.ino("c")
	k100, k200, k300 := reading.ProcKey{PID: 100, StartTime: 1000}, reading.ProcKey{PID: 200, StartTime: 2000}, reading.ProcKey{PID: 300, StartTime: 3000}

	checkProcs := func(step string, r reading.Usage, want map[reading.ProcKey]reading.ProcessUsage) {
		t.Helper()
		got := byKey(r)
		if len(got) != len(r.Processes) || len(got) != len(want) {
			t.Errorf("%s: processes %+v, want %+v", step, r.Processes, want)
		}
		for k, w := range want {
			if g := got[k]; g != w {
				t.Errorf("%s: process %+v\n got %+v\nwant %+v", step, k, g, w)
			}
		}
	}
	checkCgroups := func(step string, r reading.Usage, want map[uint64]reading.CgroupUsage) {
		t.Helper()
		got := byID(r)
		if len(got) != len(r.Cgroups) || len(got) != len(want) {
			t.Errorf("%s: cgroups %+v, want %+v", step, r.Cgroups, want)
		}
		for id, w := range want {
			if g := got[id]; g != w {
				t.Errorf("%s: cgroup %d: got %+v, want %+v", step, id, g, w)
			}
		}
	}

	// Read 1: self = own usage − children's usage.
	r, err := src.Read()
	if err != nil {
		t.Fatalf("Read 1: %v", err)
	}
	checkProcs("read 1", r, map[reading.ProcKey]reading.ProcessUsage{
		k100: {Key: k100, Comm: "busy (x)", Cgroup: a, CPUNs: 750 * ms, Switches: 15, CPU: 1, Alive: true},
		k200: {Key: k200, Comm: "threaded", Cgroup: b, CPUNs: 2000 * ms, Switches: 7 + 21, CPU: 0, Alive: true},
		k300: {Key: k300, Comm: "rootproc", Cgroup: root, CPUNs: 100 * ms, Switches: 4, CPU: 1, Alive: true},
	})
	checkCgroups("read 1", r, map[uint64]reading.CgroupUsage{
		root: {ID: root, CPUNs: 300 * ms, Switches: 4},
		a:    {ID: a, CPUNs: 350 * ms, Switches: 15},
		b:    {ID: b, CPUNs: 250 * ms, Switches: 28},
		c:    {ID: c, CPUNs: 100 * ms},
	})

	// Read 2: a's self figure drops (640−300 < 350) and is clamped; thread
	// 201 exits and 202 starts; 300 exits; 100's stat goes back (clamped).
	f.write("cpuacct/cpuacct.usage", "1050000000\n")
	f.write("cpuacct/a/cpuacct.usage", "640000000\n")
	f.write("cpuacct/a/b/cpuacct.usage", "300000000\n")
	f.write("proc/200/stat", stat("200", "threaded", "120", "100", "2", "2000", "1"))
	f.write("proc/200/task/200/status", status("4", "4"))
	f.remove("proc/200/task/201")
	f.write("proc/200/task/202/status", status("5", "0"))
	f.remove("proc/300")
	f.write("proc/100/stat", stat("100", "busy (x)", "40", "25", "1", "1000", "0"))
	r, err = src.Read()
	if err != nil {
		t.Fatalf("Read 2: %v", err)
	}
	checkProcs("read 2", r, map[reading.ProcKey]reading.ProcessUsage{
		k100: {Key: k100, Comm: "busy (x)", Cgroup: a, CPUNs: 750 * ms, Switches: 15, CPU: 0, Alive: true},
		k200: {Key: k200, Comm: "threaded", Cgroup: b, CPUNs: 2200 * ms, Switches: 28 + 1 + 5, CPU: 1, Alive: true},
		k300: {Key: k300, Comm: "rootproc", Cgroup: root, CPUNs: 100 * ms, Switches: 4, CPU: 1, Alive: false},
	})
	checkCgroups("read 2", r, map[uint64]reading.CgroupUsage{
		root: {ID: root, CPUNs: 310 * ms, Switches: 4}, // 1050 − 640 − 100
		a:    {ID: a, CPUNs: 350 * ms, Switches: 15},
		b:    {ID: b, CPUNs: 300 * ms, Switches: 34},
		c:    {ID: c, CPUNs: 100 * ms},
	})

	// Read 3: c is removed and its usage stays in root's counter; pid 100
	// is reused by a new process; 300 is forgotten.
	f.remove("cpuacct/c")
	f.write("cpuacct/cpuacct.usage", "1200000000\n")
	f.write("cpuacct/a/cpuacct.usage", "700000000\n")
	f.write("proc/100/stat", stat("100", "new", "1", "1", "1", "5000", "1"))
	f.write("proc/100/status", status("1", "1"))
	k100b := reading.ProcKey{PID: 100, StartTime: 5000}
	r, err = src.Read()
	if err != nil {
		t.Fatalf("Read 3: %v", err)
	}
	checkProcs("read 3", r, map[reading.ProcKey]reading.ProcessUsage{
		k100:  {Key: k100, Comm: "busy (x)", Cgroup: a, CPUNs: 750 * ms, Switches: 15, CPU: 0, Alive: false},
		k100b: {Key: k100b, Comm: "new", Cgroup: a, CPUNs: 20 * ms, Switches: 2, CPU: 1, Alive: true},
		k200:  {Key: k200, Comm: "threaded", Cgroup: b, CPUNs: 2200 * ms, Switches: 34, CPU: 1, Alive: true},
	})
	checkCgroups("read 3", r, map[uint64]reading.CgroupUsage{
		// 1200 − 700 − 100 (c's last usage, retired): without retiring c,
		// its whole usage would show up as root's own (500).
		root: {ID: root, CPUNs: 400 * ms, Switches: 4},
		a:    {ID: a, CPUNs: 400 * ms, Switches: 17},
		b:    {ID: b, CPUNs: 300 * ms, Switches: 34},
	})

	// Read 4: pid 100's old incarnation is gone for good; a stat we cannot
	// parse keeps the known process instead of reporting it dead.
	f.write("proc/200/stat", "200 (threaded) S garbage\n")
	r, err = src.Read()
	if err != nil {
		t.Fatalf("Read 4: %v", err)
	}
	checkProcs("read 4", r, map[reading.ProcKey]reading.ProcessUsage{
		k100b: {Key: k100b, Comm: "new", Cgroup: a, CPUNs: 20 * ms, Switches: 2, CPU: 1, Alive: true},
		k200:  {Key: k200, Comm: "threaded", Cgroup: b, CPUNs: 2200 * ms, Switches: 34, CPU: 1, Alive: true},
	})

	if err := src.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Read(); err == nil {
		t.Error("Read after Close succeeded")
	}
}

// TestFixtureNoUsage covers the v1 cpu hierarchy without cpuacct, which has
// no usage counter: cgroup CPU is summed from process deltas.
func TestFixtureNoUsage(t *testing.T) {
	dir := copyTree(t, "testdata/fixture")
	f := fixture{t: t, dir: dir, proc: filepath.Join(dir, "proc"), cg: filepath.Join(dir, "cpu")}
	f.write("cpu/a/cpu.shares", "1024\n")
	f.write("proc/100/cgroup", "2:cpuacct:/\n1:cpu:/a\n")
	src, err := New(Options{ProcfsRoot: f.proc, Resolver: cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.CPU, Mount: f.cg})})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	stepClock(src)
	r, err := src.Read()
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	root, a := f.ino("."), f.ino("a")
	want := map[uint64]reading.CgroupUsage{
		root: {ID: root, CPUNs: 2100 * ms, Switches: 32},
		a:    {ID: a, CPUNs: 750 * ms, Switches: 15},
	}
	got := byID(r)
	if len(got) != len(want) || got[root] != want[root] || got[a] != want[a] {
		t.Errorf("cgroups %+v, want %+v", r.Cgroups, want)
	}
	f.write("proc/100/stat", stat("100", "busy (x)", "60", "25", "1", "1000", "1"))
	f.remove("proc/300")
	r, _ = src.Read()
	if got := byID(r); got[a].CPUNs != 850*ms || got[root].CPUNs != 2100*ms {
		t.Errorf("after 100ms more in a: %+v", r.Cgroups)
	}
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without a hierarchy succeeded")
	}
	h := cgroup.Hierarchy{Kind: cgroup.CPUAcct, Mount: "testdata/fixture/cpuacct"}
	if _, err := New(Options{Hierarchy: cgroup.Hierarchy{Kind: cgroup.V2, Mount: "/x"}, Resolver: cgroup.NewResolver(h)}); err == nil {
		t.Error("New with mismatched hierarchies succeeded")
	}
	if _, err := New(Options{ProcfsRoot: "testdata/nope", Hierarchy: h}); err == nil {
		t.Error("New with a missing procfs succeeded")
	}
	if _, err := New(Options{ProcfsRoot: "testdata/fixture/proc", Hierarchy: cgroup.Hierarchy{Kind: cgroup.CPUAcct, Mount: "testdata/nope"}}); err == nil {
		t.Error("New with a missing cgroup mount succeeded")
	}
}

func TestParseSwitches(t *testing.T) {
	n, err := parseSwitches([]byte("Name:\tx\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t30"))
	if err != nil || n != 42 {
		t.Fatalf("= %d, %v", n, err)
	}
	for _, bad := range []string{"", "voluntary_ctxt_switches:\t1\n", "voluntary_ctxt_switches:\tx\nnonvoluntary_ctxt_switches:\t1\n"} {
		if _, err := parseSwitches([]byte(bad)); err == nil {
			t.Errorf("parseSwitches(%q) succeeded", bad)
		}
	}
}

func FuzzParseSwitches(f *testing.F) {
	f.Add([]byte("voluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t30\n"))
	f.Add([]byte("voluntary_ctxt_switches:18446744073709551615\nnonvoluntary_ctxt_switches: 1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := parseSwitches(data); err == nil && !strings.Contains(string(data), "nonvoluntary_ctxt_switches:") {
			t.Fatalf("parsed %q without both counters", data)
		}
	})
}
