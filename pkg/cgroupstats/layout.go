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

// DetectLayout reads the cgroup mounts from <procfsRoot>/self/mounts
// (falling back to <procfsRoot>/1/mounts, for a procfs whose "self" does
// not resolve; empty procfsRoot means /proc) and returns where each
// hierarchy is. Mount points under /sys/fs/cgroup are rebased under
// cgroupfsRoot (empty means /sys/fs/cgroup) the way pkg/cgroup.Detect does,
// so a container with the host's cgroupfs at /host/sys/fs/cgroup that reads
// the host's mounts file gets usable paths. When a hierarchy is mounted more
// than once, the mount inside the cgroupfs root wins, then the first listed.
// It is an error when no cgroup hierarchy is mounted at all.
func DetectLayout(procfsRoot, cgroupfsRoot string) (Layout, error) {
	mounts, path, err := cgroup.Mounts(procfsRoot, cgroupfsRoot)
	if err != nil {
		return Layout{}, err
	}
	l := layoutFromMounts(mounts)
	if l.V2Root == "" && len(l.V1Roots) == 0 {
		return Layout{}, fmt.Errorf("no cgroup hierarchy mounted according to %s", path)
	}
	return l, nil
}

func layoutFromMounts(mounts []cgroup.Mount) Layout {
	l := Layout{V1Roots: map[string]string{}}
	// inside records, per key, whether the chosen mount is inside root, so
	// a later mount inside root can replace an earlier one outside it.
	inside := map[string]bool{}
	choose := func(key string, p string, in bool, set func(string)) {
		if _, seen := inside[key]; seen && (inside[key] || !in) {
			return
		}
		inside[key] = in
		set(p)
	}
	for _, m := range mounts {
		switch m.FSType {
		case "cgroup2":
			choose("", m.Point, m.InRoot, func(p string) { l.V2Root = p })
		case "cgroup":
			for _, o := range m.Options {
				if isV1Controller(o) {
					choose(o, m.Point, m.InRoot, func(p string) { l.V1Roots[o] = p })
				}
			}
		}
	}
	return l
}
