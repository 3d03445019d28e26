package bpfloader

// Reading one cgroup subtree rather than the node (Scope).
//
// Read walks every task on the node: what the exporter needs, and what a
// `wattrace measure` run does not, which wants the CPU time of one cgroup
// it made for the command. A Scope reads that cgroup and its descendants
// only, through bpf/accounting.bpf.c's dump_cgroup: a cgroup iterator
// attached to the cgroup (descendants first) that walks each cgroup's own
// tasks with the css_task iterator. Its cost is that of the subtree's
// tasks and cgroups, whatever else the node runs.
//
// The runtime a scoped read claims from a task goes to the cgroup's entry
// in exited_cgroups, beside what the exit hooks claim there for its ended
// tasks, and dump_cgroup reports each entry whole: one record per cgroup,
// cumulative. A later Read of the node counts those claims in the
// cgroup's figure (the entry's growth) but not in any process's, which
// only the task walk credits: an Accounting is read one way or the other.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/wattrace/wattrace/pkg/reading"
)

// ErrNoScope: the kernel cannot read one cgroup's tasks (dump_cgroup needs
// the cgroup iterator and the css_task iterator kfuncs in iterator
// programs, Linux 6.7).
var ErrNoScope = errors.New("the kernel cannot read one cgroup's tasks (cgroup and css_task iterators: Linux 6.7)")

// cgRecSize is sizeof(struct cgroup_rec) in bpf/accounting.bpf.c.
const cgRecSize = int(unsafe.Sizeof(accountingCgroupRec{}))

// scopeChunk is the buffer a scoped read goes through. The cgroup iterator
// must end within one read() (the kernel's seq_file buffer, 32 KiB: 1,365
// cgroups); Read fails on a subtree with more.
const scopeChunk = 64 << 10

// Scope reads the CPU time of one cgroup of the key hierarchy and its
// descendants. It is meant for a cgroup made for the purpose, whose tasks
// all started in it or were moved in after it was made: a task's first
// read claims all it ran and was not yet claimed, wherever that was.
// Not safe for concurrent use.
type Scope struct {
	a    *Accounting
	link int // the iterator link's descriptor
	dir  string
	// last is each cgroup's entry as last read; total sums what the
	// entries grew by, so a sub-cgroup the command removed keeps counting
	// what it had.
	last  map[uint64]counters
	total counters
	buf   []byte
}

// CanScope reports whether Scope can be used (ErrNoScope otherwise).
func (a *Accounting) CanScope() bool { return a.objs.DumpCgroup != nil }

// Scope attaches a read of the cgroup at dir, a directory of the key
// hierarchy, and its descendants. Close detaches it.
func (a *Accounting) Scope(dir string) (*Scope, error) {
	if a.objs.DumpCgroup == nil {
		if a.refused != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoScope, a.refused)
		}
		return nil, ErrNoScope
	}
	// The programs key what they claim by the key hierarchy's cgroup: in
	// another hierarchy's, the exit hooks' claims would be under other
	// ids.
	if rel, err := filepath.Rel(a.hier.Mount, dir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("%s is not a cgroup of the %s hierarchy mounted at %s, which keys the accounting", dir, a.hier.Kind, a.hier.Mount)
	}
	cg, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(cg)
	fd, err := attachCgroupIter(a.objs.DumpCgroup.FD(), cg, unix.BPF_CGROUP_ITER_DESCENDANTS_PRE)
	if err != nil {
		return nil, fmt.Errorf("attach iter/cgroup to %s: %w", dir, err)
	}
	return &Scope{a: a, link: fd, dir: dir, last: map[uint64]counters{}}, nil
}

// Read returns the subtree's CPU time (ns) and context switches since its
// cgroups were made (see Scope), under the ID of the cgroup it was opened
// on. The figures never go down.
func (s *Scope) Read() (reading.CgroupUsage, error) {
	if s.link < 0 {
		return reading.CgroupUsage{}, errors.New("scope closed")
	}
	if len(s.buf) < scopeChunk {
		s.buf = make([]byte, scopeChunk)
	}
	r, err := iterCreate(s.link)
	if err != nil {
		return reading.CgroupUsage{}, fmt.Errorf("open the iterator of %s: %w", s.dir, err)
	}
	defer unix.Close(r)
	var first uint64
	have, n := 0, 0
	for {
		k, err := unix.Read(r, s.buf[have:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EOPNOTSUPP) {
			// The iterator could not end within one read.
			return reading.CgroupUsage{}, fmt.Errorf("read %s: more than %d cgroups under it", s.dir, scopeChunk/2/cgRecSize)
		}
		if err != nil {
			return reading.CgroupUsage{}, fmt.Errorf("read the iterator of %s: %w", s.dir, err)
		}
		if k == 0 {
			break
		}
		have += k
		whole := have - have%cgRecSize
		for off := 0; off < whole; off += cgRecSize {
			id, c := decodeCgroupRec(s.buf[off : off+cgRecSize])
			if n == 0 {
				first = id
			}
			n++
			s.add(id, c)
		}
		have = copy(s.buf, s.buf[whole:have])
	}
	if have != 0 {
		return reading.CgroupUsage{}, fmt.Errorf("read %s: the iterator ended inside a record (%d of %d bytes)", s.dir, have, cgRecSize)
	}
	if n == 0 {
		// Not even the cgroup itself: removed since Scope.
		return reading.CgroupUsage{}, fmt.Errorf("read %s: no such cgroup", s.dir)
	}
	return reading.CgroupUsage{ID: first, CPUNs: s.total.runtime, Switches: s.total.switches}, nil
}

// add folds one cgroup's entry, cumulative, into the total. An entry
// smaller than last read was made again (deleted by another reader of
// the maps): it counts from zero.
func (s *Scope) add(id uint64, c counters) {
	prev := s.last[id]
	s.last[id] = c
	if c.runtime < prev.runtime || c.switches < prev.switches {
		prev = counters{}
	}
	d := c.sub(prev)
	s.total.runtime += d.runtime
	s.total.switches += d.switches
}

func decodeCgroupRec(b []byte) (uint64, counters) {
	var r accountingCgroupRec
	return binary.NativeEndian.Uint64(b[unsafe.Offsetof(r.Id):]), counters{
		runtime:  binary.NativeEndian.Uint64(b[unsafe.Offsetof(r.Runtime):]),
		switches: binary.NativeEndian.Uint64(b[unsafe.Offsetof(r.Switches):]),
	}
}

// Close detaches the read and deletes the exit-map entries of the
// cgroups it saw (the caller is done with them: a measure run's cgroups
// are removed after it), so a long series of runs does not fill the map.
func (s *Scope) Close() error {
	if s.link < 0 {
		return nil
	}
	err := unix.Close(s.link)
	s.link = -1
	keys := make([]uint64, 0, len(s.last))
	for id := range s.last {
		keys = append(keys, id)
	}
	return errors.Join(err, deleteAll(s.a.objs.ExitedCgroups, keys))
}

// ClaimProcess claims what the threads of process pid ran so far, as a
// node Read would for them alone (into the same state), and records
// their cgroup as where they ran. A Scope reader calls it for itself
// once the programs are attached: a thread older than them has no record
// of where it ran, and one that then moves into a cgroup (measure's
// starting thread on cgroup v1) would otherwise take everything it ran
// since it started there when it moves out.
func (a *Accounting) ClaimProcess(pid int) error {
	fd, err := attachIter(a.objs.DumpTask.FD(), unsafe.Pointer(&iterLinkInfoTask{pid: uint32(pid)}), unsafe.Sizeof(iterLinkInfoTask{}))
	if err != nil {
		return fmt.Errorf("attach iter/task to process %d: %w", pid, err)
	}
	defer unix.Close(fd)
	r, err := iterCreate(fd)
	if err != nil {
		return fmt.Errorf("open the task iterator of process %d: %w", pid, err)
	}
	f := os.NewFile(uintptr(r), "bpf_iter")
	defer f.Close()
	if len(a.buf) < taskChunk {
		a.buf = make([]byte, taskChunk)
	}
	return streamTasks(f, a.buf, a.state.task)
}

// The kernel's ABI for iterator links with a target
// (include/uapi/linux/bpf.h), which cilium/ebpf's link.AttachIter does not
// pass: union bpf_iter_link_info's cgroup and task members and
// BPF_LINK_CREATE's iterator attributes.
type iterLinkInfoCgroup struct {
	order    uint32
	cgroupFD uint32
	cgroupID uint64
}

type iterLinkInfoTask struct {
	tid   uint32
	pid   uint32
	pidFD uint32
}

type linkCreateIterAttr struct {
	progFD     uint32
	targetFD   uint32
	attachType uint32
	flags      uint32
	// A __u64 in the kernel's ABI: the pointer's bytes first (little
	// endian), then zeros where a pointer is 32 bits. Kept a pointer for
	// the garbage collector.
	iterInfo    unsafe.Pointer
	_           [8 - unsafe.Sizeof(uintptr(0))]byte
	iterInfoLen uint32
	_           uint32
}

type iterCreateAttr struct {
	linkFD uint32
	flags  uint32
}

// attachCgroupIter links the iterator program prog to the cgroup open at
// cgroupFD, walked in order; it returns the link's descriptor.
func attachCgroupIter(prog, cgroupFD int, order uint32) (int, error) {
	info := &iterLinkInfoCgroup{order: order, cgroupFD: uint32(cgroupFD)}
	return attachIter(prog, unsafe.Pointer(info), unsafe.Sizeof(*info))
}

// attachIter links the iterator program prog with the target info (a
// member of union bpf_iter_link_info, size bytes); it returns the link's
// descriptor.
func attachIter(prog int, info unsafe.Pointer, size uintptr) (int, error) {
	attr := &linkCreateIterAttr{
		progFD:      uint32(prog),
		attachType:  unix.BPF_TRACE_ITER,
		iterInfo:    info,
		iterInfoLen: uint32(size),
	}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_LINK_CREATE, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil // close-on-exec: the kernel makes BPF descriptors so
}

// iterCreate opens a new run of the iterator linked at link.
func iterCreate(link int) (int, error) {
	attr := &iterCreateAttr{linkFD: uint32(link)}
	fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_ITER_CREATE, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil // close-on-exec: the kernel makes BPF descriptors so
}
