package cgroup

import "path/filepath"

// Mount is one cgroup or cgroup2 mount as a reader of the cgroupfs sees it.
type Mount struct {
	// Point is the mount point rebased under the cgroupfs root (see
	// Detect).
	Point string
	// FSType is "cgroup" (v1) or "cgroup2".
	FSType string
	// Options are the mount options; for v1 they include the controllers.
	Options []string
	// InRoot is true when Point lies inside the cgroupfs root: of several
	// mounts of one hierarchy, only those are known to be reachable.
	InRoot bool
}

// Mounts reads the cgroup mounts of <procfsRoot>/self/mounts (falling back
// to <procfsRoot>/1/mounts), with their points rebased under cgroupfsRoot
// the way Detect does. It also returns the mounts file it read, for errors.
func Mounts(procfsRoot, cgroupfsRoot string) ([]Mount, string, error) {
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	data, path, err := readMounts(procfsRoot)
	if err != nil {
		return nil, "", err
	}
	root := HostRoot
	if cgroupfsRoot != "" {
		root = filepath.Clean(cgroupfsRoot)
	}
	return rebased(parseMounts(data), root), path, nil
}

func rebased(ms []mount, root string) []Mount {
	out := make([]Mount, 0, len(ms))
	for _, m := range ms {
		p := rebase(m.point, root)
		out = append(out, Mount{Point: p, FSType: m.fstype, Options: m.opts, InRoot: within(p, root)})
	}
	return out
}

// ParseMounts parses a mounts file's cgroup lines, rebased under root;
// exported for the fuzz and layout tests of packages that build on it.
func ParseMounts(data []byte, root string) []Mount {
	return rebased(parseMounts(data), filepath.Clean(root))
}
