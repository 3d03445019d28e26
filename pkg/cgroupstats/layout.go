package cgroupstats

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hostRoot is where hosts mount cgroupfs; mount points read from a mounts
// file are host paths below it.
const hostRoot = "/sys/fs/cgroup"

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
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	data, path, err := readMounts(procfsRoot)
	if err != nil {
		return Layout{}, err
	}
	root := hostRoot
	if cgroupfsRoot != "" {
		root = filepath.Clean(cgroupfsRoot)
	}
	l := layoutFromMounts(parseMounts(data), root)
	if l.V2Root == "" && len(l.V1Roots) == 0 {
		return Layout{}, fmt.Errorf("no cgroup hierarchy mounted according to %s", path)
	}
	return l, nil
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

func layoutFromMounts(mounts []mount, root string) Layout {
	l := Layout{V1Roots: map[string]string{}}
	// inside records, per key, whether the chosen mount is inside root, so
	// a later mount inside root can replace an earlier one outside it.
	inside := map[string]bool{}
	choose := func(key string, p string, set func(string)) {
		in := within(p, root)
		if _, seen := inside[key]; seen && (inside[key] || !in) {
			return
		}
		inside[key] = in
		set(p)
	}
	for _, m := range mounts {
		p := rebase(m.point, root)
		switch m.fstype {
		case "cgroup2":
			choose("", p, func(p string) { l.V2Root = p })
		case "cgroup":
			for _, o := range m.opts {
				if isV1Controller(o) {
					choose(o, p, func(p string) { l.V1Roots[o] = p })
				}
			}
		}
	}
	return l
}

// mount is one cgroup or cgroup2 line of a mounts file.
type mount struct {
	point  string
	fstype string
	opts   []string
}

// parseMounts returns the cgroup and cgroup2 mounts of a /proc/PID/mounts
// file. Malformed lines are skipped: the file comes from the kernel, and a
// line we cannot read is not one we could use.
func parseMounts(data []byte) []mount {
	var out []mount
	for line := range strings.SplitSeq(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || (f[2] != "cgroup" && f[2] != "cgroup2") {
			continue
		}
		out = append(out, mount{point: unescapeMount(f[1]), fstype: f[2], opts: strings.Split(f[3], ",")})
	}
	return out
}

// rebase maps a host mount point under /sys/fs/cgroup to the same place under
// root. Points already under root, and points elsewhere, are kept.
func rebase(point, root string) string {
	point = filepath.Clean(point)
	if root == hostRoot || within(point, root) || !within(point, hostRoot) {
		return point
	}
	return root + strings.TrimPrefix(point, hostRoot)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// unescapeMount undoes the kernel's octal escaping of space, tab, newline and
// backslash in mount points (\040 and so on).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
