// Package cgroup decides which cgroup hierarchy keys workloads and maps that
// hierarchy's cgroup ids to paths and back.
//
// The BPF side keys every task by the cgroup of one hierarchy. On a pure
// cgroup2 host that is the unified hierarchy; on hybrid and v1 hosts (Slurm
// still runs on v1) every task's cgroup2 id may just be the root, so a v1
// controller's hierarchy is used instead: cpuacct, else cpu. A cgroup's id is
// its kernfs node id, which the kernel also reports as the directory's inode
// number in that hierarchy's mount, so user space can compute it with stat.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Kind names the hierarchy that keys workloads.
type Kind string

// The hierarchies Detect can choose.
const (
	V2      Kind = "v2"
	CPUAcct Kind = "cpuacct"
	CPU     Kind = "cpu"
)

// Auto is the override value that lets Detect choose.
const Auto = "auto"

// HostRoot is where hosts mount cgroupfs; mount points read from the mounts
// file are host paths below it.
const HostRoot = "/sys/fs/cgroup"

// Hierarchy is the hierarchy workloads are keyed by.
type Hierarchy struct {
	Kind Kind
	// Mount is the absolute path of the hierarchy's root directory, rebased
	// under the cgroupfs root Detect was given.
	Mount string
}

// mount is one cgroup or cgroup2 line of a mounts file.
type mount struct {
	point  string // as listed, a path in the mount namespace of the reader
	fstype string // "cgroup" or "cgroup2"
	opts   []string
}

func (m mount) hasOpt(o string) bool {
	for _, x := range m.opts {
		if x == o {
			return true
		}
	}
	return false
}

// Detect picks the key hierarchy from <procfsRoot>/self/mounts (falling back
// to <procfsRoot>/1/mounts, for a procfs whose "self" does not resolve):
// cgroup2 mounted at the cgroupfs root itself means a pure-v2 host, so V2;
// otherwise a v1 cpuacct mount gives CPUAcct, else a v1 cpu mount gives CPU,
// else cgroup2 mounted anywhere gives V2.
//
// override is "auto" (or empty) to choose as above, or "v2", "cpuacct" or
// "cpu" to force a kind; forcing one that is not mounted is an error.
//
// Mount points under /sys/fs/cgroup are rebased under cgroupfsRoot (empty
// means /sys/fs/cgroup), so a container that has the host's cgroupfs at
// /host/sys/fs/cgroup reads the host's mounts file and still gets usable
// paths. A mount point already under cgroupfsRoot is kept as is. Detect does
// not check that the directory exists; the Resolver's first use does.
func Detect(procfsRoot, cgroupfsRoot, override string) (Hierarchy, error) {
	switch override {
	case "", Auto, string(V2), string(CPUAcct), string(CPU):
	default:
		return Hierarchy{}, fmt.Errorf("unknown cgroup hierarchy %q: want one of %s, %s, %s, %s", override, Auto, V2, CPUAcct, CPU)
	}
	if procfsRoot == "" {
		procfsRoot = "/proc"
	}
	data, path, err := readMounts(procfsRoot)
	if err != nil {
		return Hierarchy{}, err
	}
	return detect(parseMounts(data), path, cgroupfsRoot, override)
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

func detect(mounts []mount, mountsPath, cgroupfsRoot, override string) (Hierarchy, error) {
	root := filepath.Clean(cgroupfsRoot)
	if cgroupfsRoot == "" {
		root = HostRoot
	}

	// find returns the first mount matching ok, preferring one inside the
	// cgroupfs tree: the same hierarchy can be mounted more than once (a
	// container runtime's bind mounts), and only the one under the root we
	// were told to use is known to be reachable.
	find := func(ok func(mount) bool) (string, bool) {
		var fallback string
		found := false
		for _, m := range mounts {
			if !ok(m) {
				continue
			}
			p := rebase(m.point, root)
			if within(p, root) {
				return p, true
			}
			if !found {
				fallback, found = p, true
			}
		}
		return fallback, found
	}
	v2AtRoot := func(m mount) bool { return m.fstype == "cgroup2" && rebase(m.point, root) == root }
	v2 := func(m mount) bool { return m.fstype == "cgroup2" }
	v1 := func(ctrl string) func(mount) bool {
		return func(m mount) bool { return m.fstype == "cgroup" && m.hasOpt(ctrl) }
	}

	var order []struct {
		kind Kind
		ok   func(mount) bool
	}
	add := func(k Kind, ok func(mount) bool) {
		order = append(order, struct {
			kind Kind
			ok   func(mount) bool
		}{k, ok})
	}
	switch Kind(override) {
	case V2:
		add(V2, v2AtRoot)
		add(V2, v2)
	case CPUAcct:
		add(CPUAcct, v1(string(CPUAcct)))
	case CPU:
		add(CPU, v1(string(CPU)))
	default:
		add(V2, v2AtRoot)
		add(CPUAcct, v1(string(CPUAcct)))
		add(CPU, v1(string(CPU)))
		add(V2, v2)
	}
	for _, o := range order {
		if p, ok := find(o.ok); ok {
			return Hierarchy{Kind: o.kind, Mount: p}, nil
		}
	}
	if override == "" || override == Auto {
		return Hierarchy{}, fmt.Errorf("no cgroup2, cpuacct or cpu hierarchy mounted according to %s", mountsPath)
	}
	return Hierarchy{}, fmt.Errorf("cgroup hierarchy %q forced but not mounted according to %s", override, mountsPath)
}

// rebase maps a host mount point under /sys/fs/cgroup to the same place under
// root. Points already under root, and points elsewhere, are kept.
func rebase(point, root string) string {
	point = filepath.Clean(point)
	if root == HostRoot || within(point, root) || !within(point, HostRoot) {
		return point
	}
	return root + strings.TrimPrefix(point, HostRoot)
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
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
