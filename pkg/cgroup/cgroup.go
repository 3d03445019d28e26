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
	"fmt"
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

// Detect picks the key hierarchy from the mounts file, as ReadMounts and
// Mounts.Hierarchy do; for callers that need nothing else of the mounts.
func Detect(procfsRoot, cgroupfsRoot, override string) (Hierarchy, error) {
	if err := checkOverride(override); err != nil {
		return Hierarchy{}, err
	}
	ms, err := ReadMounts(procfsRoot, cgroupfsRoot)
	if err != nil {
		return Hierarchy{}, err
	}
	return ms.Hierarchy(override)
}

func checkOverride(override string) error {
	switch override {
	case "", Auto, string(V2), string(CPUAcct), string(CPU):
		return nil
	}
	return fmt.Errorf("unknown cgroup hierarchy %q: want one of %s, %s, %s, %s", override, Auto, V2, CPUAcct, CPU)
}

// Hierarchy picks the hierarchy that keys workloads: cgroup2 mounted at
// the cgroupfs root itself means a pure-v2 host, so V2; otherwise a v1
// cpuacct mount gives CPUAcct, else a v1 cpu mount gives CPU, else cgroup2
// mounted anywhere gives V2.
//
// override is "auto" (or empty) to choose as above, or "v2", "cpuacct" or
// "cpu" to force a kind; forcing one that is not mounted is an error.
func (ms Mounts) Hierarchy(override string) (Hierarchy, error) {
	if err := checkOverride(override); err != nil {
		return Hierarchy{}, err
	}
	v2AtRoot := func() (string, bool) { return ms.Find(func(m Mount) bool { return isV2(m) && m.Point == ms.root }) }
	v1 := func(k Kind) func() (string, bool) { return func() (string, bool) { return ms.V1(string(k)) } }
	type choice struct {
		kind Kind
		find func() (string, bool)
	}
	var order []choice
	switch Kind(override) {
	case V2:
		order = []choice{{V2, v2AtRoot}, {V2, ms.V2}}
	case CPUAcct:
		order = []choice{{CPUAcct, v1(CPUAcct)}}
	case CPU:
		order = []choice{{CPU, v1(CPU)}}
	default:
		order = []choice{{V2, v2AtRoot}, {CPUAcct, v1(CPUAcct)}, {CPU, v1(CPU)}, {V2, ms.V2}}
	}
	for _, o := range order {
		if p, ok := o.find(); ok {
			return Hierarchy{Kind: o.kind, Mount: p}, nil
		}
	}
	if override == "" || override == Auto {
		return Hierarchy{}, fmt.Errorf("no cgroup2, cpuacct or cpu hierarchy mounted according to %s", ms.source)
	}
	return Hierarchy{}, fmt.Errorf("cgroup hierarchy %q forced but not mounted according to %s", override, ms.source)
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
