package cgroupstats

import (
	"github.com/wattrace/wattrace/pkg/cgroup"

	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDetectLayout(t *testing.T) {
	for _, tc := range []struct {
		name, procfs, cgroupfs string
		want                   Layout
	}{
		{
			name: "hybrid", procfs: "proc-hybrid",
			want: Layout{V2Root: "/sys/fs/cgroup/unified", V1Roots: map[string]string{
				"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
				"memory": "/sys/fs/cgroup/memory", "blkio": "/sys/fs/cgroup/blkio", "pids": "/sys/fs/cgroup/pids",
				"net_cls": "/sys/fs/cgroup/net_cls,net_prio", "net_prio": "/sys/fs/cgroup/net_cls,net_prio",
				"cpuset": "/sys/fs/cgroup/cpuset",
			}},
		},
		{
			name: "v2", procfs: "proc-v2",
			want: Layout{V2Root: "/sys/fs/cgroup", V1Roots: map[string]string{}},
		},
		{
			name: "v2 rebased", procfs: "proc-v2", cgroupfs: "/host/sys/fs/cgroup/",
			want: Layout{V2Root: "/host/sys/fs/cgroup", V1Roots: map[string]string{}},
		},
		{
			// Only 1/mounts; the pids mount outside the root loses to the
			// one inside it although listed first; "\040" is a space.
			name: "container", procfs: "proc-container", cgroupfs: "/host/sys/fs/cgroup",
			want: Layout{V2Root: "/host/sys/fs/cgroup/unified", V1Roots: map[string]string{
				"memory": "/host/sys/fs/cgroup/memory", "cpuacct": "/host/sys/fs/cgroup/cpuacct",
				"blkio": "/host/sys/fs/cgroup/job cg", "pids": "/host/sys/fs/cgroup/pids",
			}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DetectLayout(filepath.Join("testdata", tc.procfs), tc.cgroupfs)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestDetectLayoutErrors(t *testing.T) {
	_, err := DetectLayout(filepath.Join("testdata", "proc-none"), "")
	if err == nil || !strings.Contains(err.Error(), "no cgroup hierarchy mounted according to testdata/proc-none/self/mounts") {
		t.Errorf("no cgroups: err = %v", err)
	}
	dir := t.TempDir()
	_, err = DetectLayout(dir, "")
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "self", "mounts")) || !strings.Contains(err.Error(), filepath.Join(dir, "1", "mounts")) {
		t.Errorf("no mounts file: err = %v, want both paths named", err)
	}
}

// On this host DetectLayout must find the hierarchies /proc says are there.
func TestDetectLayoutHost(t *testing.T) {
	data, err := os.ReadFile("/proc/self/mounts")
	if err != nil || !strings.Contains(string(data), "cgroup") {
		t.Skip("no cgroup mounts here")
	}
	l, err := DetectLayout("", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range cgroup.ParseMounts(data, cgroup.HostRoot) {
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
