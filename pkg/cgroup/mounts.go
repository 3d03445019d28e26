package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Mount is one cgroup or cgroup2 mount as a reader of the cgroupfs sees it.
type Mount struct {
	// Point is the mount point rebased under the cgroupfs root (see
	// ReadMounts).
	Point string
	// FSType is "cgroup" (v1) or "cgroup2".
	FSType string
	// Options are the mount options; for v1 they include the controllers.
	Options []string
	// InRoot is true when Point lies inside the cgroupfs root: of several
	// mounts of one hierarchy, only those are known to be reachable.
	InRoot bool
}

// Mounts are the cgroup mounts of one mounts file, read once at start-up
// and shared by everything that needs a hierarchy's mount point: Hierarchy
// picks the one that keys workloads, internal/cgroupstats the ones its
// controllers' files live in. Both choose among duplicate mounts the same
// way (Find).
type Mounts struct {
	list   []Mount
	root   string // the cgroupfs root the points are rebased under
	source string // the mounts file they came from, for errors
}

// ReadMounts reads the cgroup mounts of <procfsRoot>/self/mounts (falling
// back to <procfsRoot>/1/mounts, for a procfs whose "self" does not
// resolve; empty procfsRoot means /proc).
//
// Mount points under /sys/fs/cgroup are rebased under cgroupfsRoot (empty
// means /sys/fs/cgroup), so a container that has the host's cgroupfs at
// /host/sys/fs/cgroup reads the host's mounts file and still gets usable
// paths. A mount point already under cgroupfsRoot is kept as is. Nothing
// checks that the directories exist; their first use does.
func ReadMounts(procfsRoot, cgroupfsRoot string) (Mounts, error) {
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	data, path, err := readMounts(procfsRoot)
	if err != nil {
		return Mounts{}, err
	}
	ms := ParseMounts(data, cgroupfsRoot)
	ms.source = path
	return ms, nil
}

// ParseMounts parses a mounts file's cgroup lines, rebased under root
// (empty means /sys/fs/cgroup), as ReadMounts does; for tests and fuzzing.
func ParseMounts(data []byte, root string) Mounts {
	r := HostRoot
	if root != "" {
		r = filepath.Clean(root)
	}
	ms := Mounts{root: r, source: "the mounts data"}
	for line := range strings.SplitSeq(string(data), "\n") {
		// Malformed lines are skipped: the file comes from the kernel,
		// and a line we cannot read is not one we could use.
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		p := rebase(unescapeMount(f[1]), r)
		ms.list = append(ms.list, Mount{Point: p, FSType: f[2], Options: strings.Split(f[3], ","), InRoot: within(p, r)})
	}
	return ms
}

func readMounts(procfsRoot string) ([]byte, string, error) {
	path := filepath.Join(procfsRoot, "self", "mounts")
	data, err := os.ReadFile(path)
	if err == nil {
		return data, path, nil
	}
	fallback := filepath.Join(procfsRoot, "1", "mounts")
	data, err2 := os.ReadFile(fallback)
	if err2 != nil {
		return nil, "", fmt.Errorf("read mounts: %w", errors.Join(
			fmt.Errorf("read %s: %w", path, err), fmt.Errorf("read %s: %w", fallback, err2)))
	}
	return data, fallback, nil
}

// All returns the mounts in the order the file lists them.
func (ms Mounts) All() []Mount { return slices.Clone(ms.list) }

// Source names the mounts file read, for errors.
func (ms Mounts) Source() string { return ms.source }

// Root is the cgroupfs root the mount points are rebased under.
func (ms Mounts) Root() string { return ms.root }

// Find returns the point of the first mount matching ok, preferring one
// inside the cgroupfs root: the same hierarchy can be mounted more than
// once (a container runtime's bind mounts), and only the one under the
// root we were told to use is known to be reachable.
func (ms Mounts) Find(ok func(Mount) bool) (string, bool) {
	var fallback string
	found := false
	for _, m := range ms.list {
		if !ok(m) {
			continue
		}
		if m.InRoot {
			return m.Point, true
		}
		if !found {
			fallback, found = m.Point, true
		}
	}
	return fallback, found
}

// V2 returns the cgroup2 mount's point.
func (ms Mounts) V2() (string, bool) { return ms.Find(isV2) }

// V1 returns the point of the v1 hierarchy that holds controller.
func (ms Mounts) V1(controller string) (string, bool) {
	return ms.Find(func(m Mount) bool { return m.FSType == "cgroup" && slices.Contains(m.Options, controller) })
}

func isV2(m Mount) bool { return m.FSType == "cgroup2" }
