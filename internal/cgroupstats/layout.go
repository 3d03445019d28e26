package cgroupstats

import (
	"fmt"

	"github.com/wattrace/wattrace/pkg/cgroup"
)

// Layout says where each hierarchy is mounted. The zero value has nothing
// mounted, and every Read of it finds nothing.
type Layout struct {
	// V2Root is the cgroup2 mount: the cgroupfs root itself on a pure v2
	// host, /sys/fs/cgroup/unified on a hybrid one, "" when not mounted.
	V2Root string
	// V1Roots maps each v1 controller ("cpuacct", "memory", "blkio",
	// "pids", ...) to its mount. Comounted controllers ("cpu,cpuacct")
	// map to the same directory.
	V1Roots map[string]string
}

// v1Controllers are the controller names that may appear among a v1 mount's
// options; the others there (rw, relatime, name=systemd, ...) are mount
// options, not controllers.
func isV1Controller(opt string) bool {
	switch opt {
	case "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "net_cls",
		"blkio", "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc":
		return true
	}
	return false
}

// LayoutOf returns where each hierarchy is mounted, from the mounts read
// once at start-up (cgroup.ReadMounts, which also rebases them under the
// cgroupfs root). When a hierarchy is mounted more than once it picks as
// Mounts.Find does: the mount inside the cgroupfs root, then the first
// listed. It is an error when no cgroup hierarchy is mounted at all.
func LayoutOf(ms cgroup.Mounts) (Layout, error) {
	l := Layout{V1Roots: map[string]string{}}
	l.V2Root, _ = ms.V2()
	for _, m := range ms.All() {
		for _, o := range m.Options {
			if _, done := l.V1Roots[o]; !done && m.FSType == "cgroup" && isV1Controller(o) {
				l.V1Roots[o], _ = ms.V1(o)
			}
		}
	}
	if l.V2Root == "" && len(l.V1Roots) == 0 {
		return Layout{}, fmt.Errorf("no cgroup hierarchy mounted according to %s", ms.Source())
	}
	return l, nil
}
