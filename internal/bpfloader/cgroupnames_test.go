package bpfloader

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

func inodeOf(t *testing.T, dir string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// A cgroup created and removed while CgroupNames runs keeps its name, in
// each hierarchy this host has; a cgroup of another hierarchy is not taken
// for one of the key hierarchy.
func TestCgroupNamesRemembersRemovedCgroups(t *testing.T) {
	testenv.RequireRoot(t)
	for _, h := range []cgroup.Hierarchy{
		{Kind: cgroup.V2, Mount: "/sys/fs/cgroup/unified"},
		{Kind: cgroup.CPUAcct, Mount: "/sys/fs/cgroup/cpuacct"},
	} {
		t.Run(string(h.Kind), func(t *testing.T) {
			if _, err := os.Stat(filepath.Join(h.Mount, "cgroup.procs")); err != nil {
				t.Fatalf("this test expects the hybrid layout's %s hierarchy at %s: %v", h.Kind, h.Mount, err)
			}
			names, err := LoadCgroupNames(Options{Hierarchy: h})
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			defer names.Close()
			parent := testenv.TempDir(t, h.Mount)
			child := filepath.Join(parent, "step.0")
			if err := os.Mkdir(child, 0o755); err != nil {
				t.Fatal(err)
			}
			pid, cid := inodeOf(t, parent), inodeOf(t, child)
			if err := os.Remove(child); err != nil {
				t.Fatal(err)
			}
			want := "/" + filepath.Base(parent) + "/step.0"
			if got, ok := names.Path(cid); !ok || got != want {
				t.Fatalf("removed child %d: %q %v, want %q", cid, got, ok, want)
			}
			if got, ok := names.Path(pid); !ok || got != "/"+filepath.Base(parent) {
				t.Fatalf("parent %d: %q %v", pid, got, ok)
			}
			// A cgroup of a hierarchy that does not key workloads.
			other := testenv.TempDir(t, "/sys/fs/cgroup/memory")
			if got, ok := names.Path(inodeOf(t, other)); ok && got == "/"+filepath.Base(other) {
				t.Fatalf("memory cgroup %s remembered for the %s hierarchy", got, h.Kind)
			}
			st, err := names.ProgramStats()
			if err != nil || len(st) != 1 || st[0].Name != "cgroup_mkdir" {
				t.Fatalf("program stats %+v %v", st, err)
			}
		})
	}
}
