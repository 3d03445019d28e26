package measure

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
// tick-sampled: there runs read the node's accounting. (Its figure put
// together from its parts, the root's children's cpu.stat and the root's
// own tasks, was tried and came out 6-16% low while other sessions' tests
// made and removed top-level cgroups: the kernel keeps nothing of what a
// removed top-level cgroup ran, docs/measure.md.)

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
