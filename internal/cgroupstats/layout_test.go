package cgroupstats

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/cgroup"
)

// mountsFixtures are pkg/cgroup's mounts files, the one set that this
// test and cgroup.Detect's share.
var mountsFixtures = filepath.Join("..", "..", "pkg", "cgroup", "testdata", "mounts")

func TestLayoutOf(t *testing.T) {
	hybrid := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu", "cpuacct": "/sys/fs/cgroup/cpuacct",
		"cpuset": "/sys/fs/cgroup/cpuset", "memory": "/sys/fs/cgroup/memory",
	}
	tests := []struct {
		name, procfs, cgroupfs string
		want                   Layout
	}{
		{
			name: "hybrid", procfs: "hybrid-comounted",
			want: Layout{V2Root: "/sys/fs/cgroup/unified", V1Roots: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
				"memory": "/sys/fs/cgroup/memory", "blkio": "/sys/fs/cgroup/blkio", "pids": "/sys/fs/cgroup/pids",
				"net_cls": "/sys/fs/cgroup/net_cls,net_prio", "net_prio": "/sys/fs/cgroup/net_cls,net_prio",
				"cpuset": "/sys/fs/cgroup/cpuset",
			}},
		},
		{
			name: "v2", procfs: "v2",
			want: Layout{V2Root: "/sys/fs/cgroup", V1Roots: map[string]string{}},
		},
		{
			name: "v2 rebased", procfs: "v2", cgroupfs: "/host/sys/fs/cgroup/",
			want: Layout{V2Root: "/host/sys/fs/cgroup", V1Roots: map[string]string{}},
		},
		{
			// Only 1/mounts; the pids mount outside the root loses to the
			// one inside it although listed first; "\040" is a space.
			name: "container", procfs: "container-host", cgroupfs: "/host/sys/fs/cgroup",
			want: Layout{V2Root: "/host/sys/fs/cgroup/unified", V1Roots: map[string]string{
				"memory": "/host/sys/fs/cgroup/memory", "cpuacct": "/host/sys/fs/cgroup/cpuacct",
				"blkio": "/host/sys/fs/cgroup/job cg", "pids": "/host/sys/fs/cgroup/pids",
			}},
		},
		// pkg/cgroup's own fixtures.
		{name: "hybrid, cpu and cpuacct apart", procfs: "hybrid", want: Layout{V2Root: "/sys/fs/cgroup/unified", V1Roots: hybrid}},
		{name: "fallback to 1/mounts", procfs: "fallback", want: Layout{V2Root: "/sys/fs/cgroup/unified", V1Roots: hybrid}},
		{
			// name=systemd and name=cpuacct_not are no controllers.
			name: "v1 without cpuacct", procfs: "v1-nocpuacct",
			want: Layout{V1Roots: map[string]string{"cpu": "/sys/fs/cgroup/cpu", "memory": "/sys/fs/cgroup/memory"}},
		},
		{
			name: "comounted rebased", procfs: "comounted", cgroupfs: "/host/cg",
			want: Layout{V1Roots: map[string]string{
				"cpu": "/host/cg/cpu,cpuacct", "cpuacct": "/host/cg/cpu,cpuacct", "memory": "/host/cg/memory",
				"net_cls": "/host/cg/net_cls,net_prio", "net_prio": "/host/cg/net_cls,net_prio",
			}},
		},
		{
			// The read-only bind mount under /sys/fs/cgroup is rebased
			// into the root and wins; cgroup2 is found outside it.
			name: "container bind mounts", procfs: "container", cgroupfs: "/host/sys/fs/cgroup",
			want: Layout{V2Root: "/host/sys/fs/cgroup/my unified", V1Roots: map[string]string{"cpuacct": "/host/sys/fs/cgroup/cpuacct"}},
		},
		{
			name: "container bind mounts, default root", procfs: "container",
			want: Layout{V2Root: "/host/sys/fs/cgroup/my unified", V1Roots: map[string]string{"cpuacct": "/sys/fs/cgroup/cpuacct"}},
		},
		{
			// No hierarchy keys workloads here, but memory is readable.
			name: "memory only", procfs: "none",
			want: Layout{V1Roots: map[string]string{"memory": "/sys/fs/cgroup/memory"}},
		},
	}
	// Every fixture has a case here ("no-cgroups" in the errors' test).
	covered := map[string]bool{"no-cgroups": true}
	for _, tc := range tests {
		covered[tc.procfs] = true
	}
	dirs, err := os.ReadDir(mountsFixtures)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if d.IsDir() && !covered[d.Name()] {
			t.Errorf("fixture %s has no case", d.Name())
		}
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := cgroup.ReadMounts(filepath.Join(mountsFixtures, tc.procfs), tc.cgroupfs)
			if err != nil {
				t.Fatal(err)
			}
			got, err := LayoutOf(ms)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestLayoutOfNoCgroups(t *testing.T) {
	ms, err := cgroup.ReadMounts(filepath.Join(mountsFixtures, "no-cgroups"), "")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LayoutOf(ms)
	if err == nil || !strings.Contains(err.Error(), "no cgroup hierarchy mounted according to "+filepath.Join(mountsFixtures, "no-cgroups", "self", "mounts")) {
		t.Errorf("no cgroups: err = %v", err)
	}
}

// On this host LayoutOf must find the hierarchies /proc says are there.
func TestLayoutOfHost(t *testing.T) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil || !strings.Contains(string(data), "cgroup") {
		testenv.Need(t, "no cgroup mounts here")
	}
	l, err := hostLayout()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cgroup.ParseMounts(data, cgroup.HostRoot).All() {
		if m.FSType == "cgroup2" && l.V2Root == "" {
			t.Errorf("cgroup2 mounted at %s but V2Root empty", m.Point)
		}
		for _, o := range m.Options {
			if isV1Controller(o) && l.V1Roots[o] == "" {
				t.Errorf("%s mounted at %s but missing from V1Roots", o, m.Point)
			}
		}
	}
}

// hostLayout is this host's layout, for the tests that read real cgroups.
func hostLayout() (Layout, error) {
	ms, err := cgroup.ReadMounts("", "")
	if err != nil {
		return Layout{}, err
	}
	return LayoutOf(ms)
}
