package stats

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/cgroup"
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
	if p, ok := l.resolve(id1); !ok || p != "/slurm/job_1" {
		t.Fatalf("new cgroup named %q %v, want /slurm/job_1", p, ok)
	}
	if _, ok := res.Known(id2); ok {
		t.Fatal("naming job_1 walked the hierarchy (job_2 is known)")
	}
	// A name that is no longer the id's directory: the cgroup is gone
	// (removed, its path re-used); no walk.
	time.Sleep(1100 * time.Millisecond) // the resolver walks at most once a second
	if p, ok := l.resolve(id3); ok {
		t.Errorf("a stale name from the map resolved to %q", p)
	}
	id4 := inodeOf(t, filepath.Join(root, "slurm/job_4"))
	if _, ok := res.Known(id4); ok {
		t.Error("a stale name walked the hierarchy (job_4 is known)")
	}
	// An id the map does not know is found by a walk.
	if p, ok := l.resolve(id4); !ok || p != "/slurm/job_4" {
		t.Errorf("the fallback walk did not run: job_4 %q %v", p, ok)
	}
}
