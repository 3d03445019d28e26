package stats

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

func inodeOf(t *testing.T, p string) uint64 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// A cgroup created after the resolver's last walk is named from the
// cgroup_mkdir map and confirmed with one stat, not by walking the
// hierarchy again (which, with a walk per new id, was the largest part of
// a step on a node that makes cgroups all the time). One whose name is no
// longer its directory is gone, also without a walk.
func TestNewCgroupNamedWithoutWalk(t *testing.T) {
	root := t.TempDir()
	res := cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.Kind("cpuacct"), Mount: root})
	if _, ok := res.Path(inodeOf(t, root)); !ok {
		t.Fatal("root not found")
	}
	for _, d := range []string{"job_1", "job_2", "job_3", "job_4"} {
		if err := os.MkdirAll(filepath.Join(root, "slurm", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	id1, id2, id3 := inodeOf(t, filepath.Join(root, "slurm/job_1")), inodeOf(t, filepath.Join(root, "slurm/job_2")), inodeOf(t, filepath.Join(root, "slurm/job_3"))
	l := newLedger(res, time.Minute, newShares(nil))
	l.names = names{id1: "/slurm/job_1", id3: "/slurm/job_2"} // id3's name is wrong
	if p, ok, _ := l.resolve(id1); !ok || p != "/slurm/job_1" {
		t.Fatalf("new cgroup named %q %v, want /slurm/job_1", p, ok)
	}
	if _, ok := res.Known(id2); ok {
		t.Fatal("naming job_1 walked the hierarchy (job_2 is known)")
	}
	// A name that is no longer the id's directory: the cgroup is gone
	// (removed, its path re-used); no walk.
	time.Sleep(1100 * time.Millisecond) // the resolver walks at most once a second
	if p, ok, _ := l.resolve(id3); ok {
		t.Errorf("a stale name from the map resolved to %q", p)
	}
	id4 := inodeOf(t, filepath.Join(root, "slurm/job_4"))
	if _, ok := res.Known(id4); ok {
		t.Error("a stale name walked the hierarchy (job_4 is known)")
	}
	// An id the map does not know is found by a walk.
	if p, ok, _ := l.resolve(id4); !ok || p != "/slurm/job_4" {
		t.Errorf("the fallback walk did not run: job_4 %q %v", p, ok)
	}
}

// countingResolver counts the ledger's questions to a real resolver.
type countingResolver struct {
	*cgroup.Resolver
	paths, exists map[uint64]int
}

func (c *countingResolver) Path(id uint64) (string, bool) {
	c.paths[id]++
	return c.Resolver.Path(id)
}

func (c *countingResolver) Exists(id uint64, rel string) bool {
	c.exists[id]++
	return c.Resolver.Exists(id, rel)
}

// The accounting reports a removed cgroup's final counters for many reads
// after its last task (its exit-map entry, until it has been idle for
// cgIdlePasses). Once the ledger knows the cgroup is gone (its directory
// no longer holds that id, or a walk of the hierarchy after the id was
// reported did not find it) it asks about the id no more: each question
// about an id cgroupfs no longer has could walk the whole hierarchy,
// which, for every removed cgroup the cgroup_mkdir map did not name and
// at every step while another program made and removed cgroups, was
// 27–30% of the exporter's CPU.
func TestGoneCgroupAskedOnce(t *testing.T) {
	root := t.TempDir()
	job := filepath.Join(root, "slurm", "job_1")
	if err := os.MkdirAll(job, 0o755); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(root, "short")
	if err := os.Mkdir(short, 0o755); err != nil {
		t.Fatal(err)
	}
	idJob, idShort := inodeOf(t, job), inodeOf(t, short)
	if err := os.Remove(short); err != nil { // gone before it was ever named
		t.Fatal(err)
	}
	res := &countingResolver{Resolver: cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.Kind("cpuacct"), Mount: root}),
		paths: map[uint64]int{}, exists: map[uint64]int{}}
	l := newLedger(res, time.Hour, newShares(nil))
	r := reading.Usage{Cgroups: []reading.CgroupUsage{{ID: idJob, CPUNs: 1e9}, {ID: idShort, CPUNs: 2e9}}}
	now := time.Unix(0, 0)
	l.absorbReading(r, now, true)
	if w := l.cgroup(idJob); w == nil || w.w.Cgroup != "/slurm/job_1" || !w.w.Alive {
		t.Fatalf("job_1 not named and alive: %+v", w)
	}
	// The first walk ran for job_1; within the resolver's rate limit the
	// short one is not looked for, so it is not known to be gone yet.
	if res.Walks() != 1 || l.cgIDs[idShort].ended {
		t.Fatalf("after the first read: %d walks, short one ended %v; want 1 walk, not ended", res.Walks(), l.cgIDs[idShort].ended)
	}
	if err := os.Remove(job); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the resolver walks at most once a second
	for i := 1; i <= 10; i++ {
		r.Cgroups[0].CPUNs += 1e6 // a last exit's claim, then nothing new
		l.absorbReading(r, now.Add(time.Duration(i)*time.Second), false)
	}
	if w := l.cgroup(idJob); w == nil || w.w.Cgroup != "/slurm/job_1" || w.w.Alive || math.Abs(w.f.CPUSeconds-1.01) > 1e-9 {
		t.Errorf("removed job_1: %+v, want /slurm/job_1, not alive, 1.01 s", w)
	}
	if w := l.cgroup(idShort); w == nil || w.w.Cgroup != fmt.Sprintf("id:%d", idShort) || w.w.Alive {
		t.Errorf("never named: %+v", w)
	}
	// Each asked on the first read and once more: job_1 found gone by its
	// directory, the short one by the one walk that looked for it.
	if res.paths[idJob] != 2 || res.exists[idJob] != 2 || res.paths[idShort] != 2 || res.Walks() != 2 {
		t.Errorf("over 11 reads: job_1 named %d times and checked %d, the short one asked %d times, %d walks; want 2, 2, 2, 2",
			res.paths[idJob], res.exists[idJob], res.paths[idShort], res.Walks())
	}
}

// A cgroup that holds a live process of the reading exists (a cgroup with
// a task in it can't be removed), so the ledger does not look it up in
// cgroupfs at every step; one without a live process is, and is found
// gone once removed.
func TestHeldCgroupNotStatted(t *testing.T) {
	root := t.TempDir()
	held, empty := filepath.Join(root, "held"), filepath.Join(root, "empty")
	for _, d := range []string{held, empty} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	idHeld, idEmpty := inodeOf(t, held), inodeOf(t, empty)
	res := &countingResolver{Resolver: cgroup.NewResolver(cgroup.Hierarchy{Kind: cgroup.Kind("cpuacct"), Mount: root}),
		paths: map[uint64]int{}, exists: map[uint64]int{}}
	l := newLedger(res, time.Hour, newShares(nil))
	r := reading.Usage{
		Processes: []reading.ProcessUsage{{Key: reading.ProcKey{PID: 7, StartTime: 1}, Cgroup: idHeld, Alive: true, CPUNs: 1e9}},
		Cgroups:   []reading.CgroupUsage{{ID: idHeld, CPUNs: 1e9}, {ID: idEmpty}},
	}
	now := time.Unix(0, 0)
	for i := range 5 {
		l.absorbReading(r, now.Add(time.Duration(i)*time.Second), i == 0)
	}
	if res.exists[idHeld] != 1 || res.exists[idEmpty] != 5 {
		t.Errorf("over 5 reads: the cgroup with a live process looked up %d times, the empty one %d; want 1 (its first read) and 5",
			res.exists[idHeld], res.exists[idEmpty])
	}
	if !l.cgroup(idHeld).w.Alive || !l.cgroup(idEmpty).w.Alive {
		t.Error("a cgroup that exists is not alive")
	}
	// The process ends (reported dead for the last time) and its cgroup is
	// removed: looked up again, and gone.
	r.Processes[0].Alive = false
	if err := os.Remove(held); err != nil {
		t.Fatal(err)
	}
	l.absorbReading(r, now.Add(5*time.Second), false)
	if w := l.cgroup(idHeld); w.w.Alive || !l.cgIDs[idHeld].ended || res.exists[idHeld] != 2 {
		t.Errorf("removed after its process ended: alive %v, ended %v, looked up %d times; want false, true, 2", w.w.Alive, l.cgIDs[idHeld].ended, res.exists[idHeld])
	}
}
