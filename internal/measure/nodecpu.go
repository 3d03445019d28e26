package measure

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/reading"
)

// The node's busy CPU time where a run reads its own cgroup alone
// (runReader): the share of the node's energy a run gets is its CPU time
// over the node's, so the node's must be as exact as the command's.
// /proc/stat is not (ticks, printed in 10 ms units: nothing of a 1 ms
// run). The root cpuacct cgroup is: the scheduler charges it every
// task's runtime as it charges the task's sum_exec_runtime (cpuacct_charge,
// beside it in update_curr), the figure the BPF accounting claims from, to
// the nanosecond. It is readable wherever a v1 cpuacct hierarchy is
// mounted, which hybrid hosts (this project's test machines among them)
// do. A cgroup2-only host has no such file, and its root's cpu.stat is
// tick-sampled; there the node's figure is put together from its parts
// (cgroup2Node): each child of the root's cpu.stat, which the kernel
// charges from each task's runtime as it charges the task's own (to the
// microsecond it prints), and the root's own tasks read alone.

// rootCPUAcct opens the root cpuacct cgroup's usage under the mounts of
// procfsRoot. ok is false, with the reason, where there is none to be
// had: no v1 cpuacct hierarchy, or its mount is not the hierarchy's root
// (a container's bind mount of its own cgroup: a part of the node).
func rootCPUAcct(procfsRoot string) (read func() (uint64, error), closeIt func(), why string) {
	ms, err := cgroup.ReadMounts(procfsRoot, "")
	if err != nil {
		return nil, nil, err.Error()
	}
	dir, ok := ms.V1(string(cgroup.CPUAcct))
	if !ok {
		return nil, nil, "no cpuacct hierarchy is mounted"
	}
	// The kernel shows cgroup.sane_behavior in a v1 hierarchy's root
	// alone, whatever the cgroup namespace.
	if _, err := os.Stat(filepath.Join(dir, "cgroup.sane_behavior")); err != nil {
		return nil, nil, fmt.Sprintf("the cpuacct mount %s is not its hierarchy's root", dir)
	}
	f, err := os.Open(filepath.Join(dir, "cpuacct.usage"))
	if err != nil {
		return nil, nil, err.Error()
	}
	r := &usageFile{f: f, buf: make([]byte, 32)}
	if _, err := r.read(); err != nil {
		f.Close()
		return nil, nil, err.Error()
	}
	return r.read, func() { _ = f.Close() }, ""
}

// usageFile reads a cgroup counter file held open: each read from offset
// 0 makes the kernel print it anew.
type usageFile struct {
	f    *os.File
	buf  []byte
	last uint64
}

// read returns the counter, checked: a number that never goes down.
func (u *usageFile) read() (uint64, error) {
	n, err := u.f.ReadAt(u.buf, 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return 0, fmt.Errorf("read %s: %w", u.f.Name(), err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(u.buf[:n])), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", u.f.Name(), reading.Reject(reading.Unreadable, 0, "%q", u.buf[:n]))
	}
	if v < u.last {
		return 0, fmt.Errorf("%s: %w", u.f.Name(), reading.Reject(reading.Backwards, float64(v), "last read %d", u.last))
	}
	u.last = v
	return v, nil
}

// cgroup2Node reads the node's busy CPU time on cgroup2 mounted at root:
// the sum of the root's children's usage_usec, each counted by its growth
// (a child made since counts from zero, one removed keeps what it had),
// and what own, a read of the root's own tasks (kernel threads, mostly),
// says they ran. ok is false, with the reason, where root is not the
// hierarchy's root (a cgroup namespace's). It closes own when it fails,
// and v2Node.close does once it is done.
func cgroup2Node(root string, own CgroupReader) (*v2Node, string) {
	// cgroup.events is in every cgroup but the hierarchy's root.
	if _, err := os.Stat(filepath.Join(root, "cgroup.events")); err == nil {
		_ = own.Close()
		return nil, fmt.Sprintf("%s is not the cgroup2 hierarchy's root", root)
	}
	n := &v2Node{root: root, own: own, children: map[string]*childUsage{}, buf: make([]byte, 512)}
	if _, err := n.read(); err != nil {
		n.close()
		return nil, err.Error()
	}
	return n, ""
}

type v2Node struct {
	root     string
	own      CgroupReader
	children map[string]*childUsage
	// total is the children's usage as first read plus their growth
	// since, in ns.
	total uint64
	pass  uint64
	buf   []byte
}

// childUsage is a child's cpu.stat, held open, and its usage as last
// read.
type childUsage struct {
	f    *os.File
	last uint64
	pass uint64
}

func (n *v2Node) read() (uint64, error) {
	ents, err := os.ReadDir(n.root)
	if err != nil {
		return 0, err
	}
	n.pass++
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		c := n.children[e.Name()]
		if c == nil {
			f, err := os.Open(filepath.Join(n.root, e.Name(), "cpu.stat"))
			if err != nil {
				continue // removed since the listing
			}
			c = &childUsage{f: f}
			n.children[e.Name()] = c
		}
		k, err := c.f.ReadAt(n.buf, 0)
		if err != nil && !errors.Is(err, io.EOF) {
			if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENODEV) {
				continue // removed: keeps what it had
			}
			return 0, fmt.Errorf("read %s: %w", c.f.Name(), err)
		}
		us, ok := usageUsec(n.buf[:k])
		if !ok {
			return 0, fmt.Errorf("%s: %w", c.f.Name(), reading.Reject(reading.Unreadable, 0, "no usage_usec in %q", n.buf[:k]))
		}
		v := us * 1000
		if v >= c.last {
			n.total += v - c.last
		} else {
			// Another cgroup by that name since the last read.
			n.total += v
		}
		c.last, c.pass = v, n.pass
	}
	for name, c := range n.children {
		if c.pass != n.pass {
			_ = c.f.Close()
			delete(n.children, name)
		}
	}
	u, err := n.own.Read()
	if err != nil {
		return 0, fmt.Errorf("read the root cgroup's own tasks: %w", err)
	}
	return n.total + u.CPUNs, nil
}

func (n *v2Node) close() {
	for _, c := range n.children {
		_ = c.f.Close()
	}
	_ = n.own.Close()
}

// usageUsec is cpu.stat's usage_usec (its first line).
func usageUsec(b []byte) (uint64, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "usage_usec "); ok {
			us, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return us, err == nil
		}
	}
	return 0, false
}
