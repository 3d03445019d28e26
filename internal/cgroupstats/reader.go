package cgroupstats

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Reader reads Stats of workload cgroups. It keeps its read buffers and a
// cache of block device names between calls, so it is not safe for
// concurrent use: give each goroutine its own.
type Reader struct {
	v2Root  string
	cpuacct string // v1 mounts, "" when not mounted
	cpu     string
	memory  string
	blkio   string
	pids    string
	sysfs   string

	buf  []byte // file contents
	path []byte // NUL-terminated path being opened

	// names caches block device names by major<<32|minor. A device number
	// keeps its name while the device exists, and reading uevent for every
	// device on every Read would double the files opened. Numbers whose
	// uevent could not be read get their "maj:min" from unnamed instead,
	// which only saves formatting it again: they are looked up on every
	// Read, so a device that shows up in sysfs later gets its name.
	names   map[uint64]string
	unnamed map[uint64]string

	// check validates what is read before it reaches a counter.
	check  *checker
	groups Group // what ReadInto reads
}

// Group is a set of the resource groups a Reader reads; the files of the
// others are not opened, and their fields stay unavailable.
type Group uint8

// The groups: CPU (cpu.stat / cpuacct), memory, IO, pressure (PSI), tasks.
const (
	GroupCPU Group = 1 << iota
	GroupMemory
	GroupIO
	GroupPressure
	GroupTasks
	AllGroups = GroupCPU | GroupMemory | GroupIO | GroupPressure | GroupTasks
)

// GroupNames are the groups by their configuration names.
var GroupNames = map[string]Group{"cpu": GroupCPU, "memory": GroupMemory, "io": GroupIO, "pressure": GroupPressure, "tasks": GroupTasks}

// Only limits the reader to the groups in g (all by default).
func (r *Reader) Only(g Group) { r.groups = g }

// NewReader returns a Reader for the hierarchies of l. sysfsRoot is where
// sysfs is mounted, for device names (empty means /sys).
func NewReader(l Layout, sysfsRoot string) *Reader {
	return NewReaderWith(l, Options{SysfsRoot: sysfsRoot})
}

// NewReaderWith returns a Reader for the hierarchies of l whose readings
// are validated (see Options) and whose rejections are logged through
// o.Log and reported by Health.
func NewReaderWith(l Layout, o Options) *Reader {
	sysfsRoot := o.SysfsRoot
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	return &Reader{
		check:   newChecker(o),
		v2Root:  l.V2Root,
		cpuacct: l.V1Roots["cpuacct"],
		cpu:     l.V1Roots["cpu"],
		memory:  l.V1Roots["memory"],
		blkio:   l.V1Roots["blkio"],
		pids:    l.V1Roots["pids"],
		sysfs:   sysfsRoot,
		buf:     make([]byte, 8192),
		path:    make([]byte, 0, 256),
		names:   map[uint64]string{},
		unnamed: map[uint64]string{},
		groups:  AllGroups,
	}
}

// Read returns the stats of the cgroup at rel, a path relative to the
// hierarchy roots ("/slurm/uid_0/job_5/step_0"; "/" is the root).
//
// Each resource is read from the first place that has the cgroup: the v1
// controller's mount, then the unified hierarchy. So on a hybrid host a
// Slurm job (which exists only under the v1 mounts) is read from v1, while a
// cgroup that exists only in the unified hierarchy is read from there, with
// the fields of controllers bound to v1 (memory, io, pids there) marked
// unavailable rather than zero.
//
// Read returns what it could read together with an error joining one error
// per file that could not be read or parsed, each naming the file. A file
// that does not exist is not an error, only an unavailable field; but when
// none of the files exists, the cgroup is gone (or was never there) and the
// error wraps fs.ErrNotExist.
func (r *Reader) Read(rel string) (reading.Resources, error) {
	var s reading.Resources
	err := r.ReadInto(rel, &s)
	return s, err
}

// ReadInto is Read into s, reusing the storage of s.IO: a caller that
// reads the same workload every interval and keeps its Stats allocates
// nothing once device names are cached. s is overwritten entirely.
func (r *Reader) ReadInto(rel string, s *reading.Resources) error {
	clean, err := cleanRel(rel)
	*s = reading.Resources{IO: s.IO[:0]}
	if err != nil {
		return err
	}
	st := readState{r: r, rel: clean, s: s}
	for _, g := range []struct {
		g    Group
		read func()
	}{{GroupCPU, st.cpu}, {GroupMemory, st.memory}, {GroupIO, st.io}, {GroupPressure, st.pressure}, {GroupTasks, st.tasks}} {
		if r.groups&g.g != 0 {
			g.read()
		}
	}
	if st.found == 0 && len(st.errs) == 0 {
		err = fmt.Errorf("cgroup %s: %w", rel, fs.ErrNotExist)
	} else {
		err = errors.Join(st.errs...)
	}
	r.check.check(clean, s, err)
	return err
}

// cleanRel checks that rel names a cgroup inside the hierarchies and returns
// it without a trailing slash ("" for the root), ready to append to a mount.
func cleanRel(rel string) (string, error) {
	if !strings.HasPrefix(rel, "/") {
		return "", fmt.Errorf("cgroup path %q: want an absolute path", rel)
	}
	for seg := range strings.SplitSeq(rel, "/") {
		if seg == ".." {
			return "", fmt.Errorf("cgroup path %q: must not contain \"..\"", rel)
		}
	}
	rel = path.Clean(rel) // allocates only when rel was not clean
	if rel == "/" {
		return "", nil
	}
	return rel, nil
}

// readState is one ReadInto in progress.
type readState struct {
	r     *Reader
	rel   string
	s     *reading.Resources
	found int // files that existed
	errs  []error
}

// status is the outcome of reading one file.
type status int

const (
	// absent: the hierarchy is not mounted, or the file (or the cgroup)
	// does not exist in it. Only this outcome makes a reader try the next
	// hierarchy: a file that exists but fails belongs to this hierarchy, and
	// falling back would mix sources.
	absent status = iota
	failed        // read or parse error, recorded in errs
	present
)

// read returns the contents of root/rel/name, a file the kernel writes as
// one record (see readPath), valid until the next read.
func (st *readState) read(root, name string) ([]byte, status) {
	return st.readFile(root, name, true)
}

// readList is read for a file of one record per line that the kernel may
// return a page at a time (tasks, cgroup.threads).
func (st *readState) readList(root, name string) ([]byte, status) {
	return st.readFile(root, name, false)
}

func (st *readState) readFile(root, name string, oneRecord bool) ([]byte, status) {
	if root == "" {
		return nil, absent
	}
	r := st.r
	r.path = append(r.path[:0], root...)
	r.path = append(r.path, st.rel...)
	r.path = append(r.path, '/')
	r.path = append(r.path, name...)
	r.path = append(r.path, 0)
	data, buf, err := readPath(r.path, r.buf, oneRecord)
	r.buf = buf
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, absent
		}
		st.found++ // it is there, just unreadable
		st.errs = append(st.errs, fmt.Errorf("read %s: %w", st.pathString(), err))
		return nil, failed
	}
	st.found++
	return data, present
}

func (st *readState) pathString() string {
	p := st.r.path
	return string(p[:len(p)-1])
}

// fail records a parse error for the file read last.
func (st *readState) fail(err error) {
	st.errs = append(st.errs, fmt.Errorf("parse %s: %w", st.pathString(), err))
}

// uint reads a one-number file through parse, setting field on success.
func (st *readState) uint(root, name string, parse func([]byte) (uint64, error), dst *uint64, field reading.ResourceField) status {
	data, stat := st.read(root, name)
	if stat != present {
		return stat
	}
	v, err := parse(data)
	if err != nil {
		st.fail(err)
		return failed
	}
	*dst = v
	st.s.Available |= field
	return present
}

var (
	keysCPUAcctStat = []string{"user", "system"}
	keysCPUStat     = []string{"user_usec", "system_usec"}
)

func (st *readState) cpu() {
	s, root := st.s, st.r.cpuacct
	// usage_user/usage_sys are in ns and exact; cpuacct.stat is sampled at
	// the tick and in USER_HZ, so it is only the fallback for kernels
	// before 4.7.
	data, stat := st.read(root, "cpuacct.usage_user")
	switch stat {
	case failed:
		return
	case present:
		user, err := parseSingle(data)
		if err != nil {
			st.fail(err)
			return
		}
		data, stat := st.read(root, "cpuacct.usage_sys")
		if stat != present {
			return
		}
		sys, err := parseSingle(data)
		if err != nil {
			st.fail(err)
			return
		}
		s.CPUUserSeconds, s.CPUSystemSeconds = float64(user)/1e9, float64(sys)/1e9
		s.Available |= reading.FieldCPU
		return
	}
	var v [2]uint64
	data, stat = st.read(root, "cpuacct.stat")
	if stat == present {
		// USER_HZ is 100 on every architecture the kernel exports it for.
		if st.kv(data, keysCPUAcctStat, v[:], 0b11) {
			s.CPUUserSeconds, s.CPUSystemSeconds = float64(v[0])/100, float64(v[1])/100
			s.Available |= reading.FieldCPU
		}
	}
	if stat != absent {
		return
	}
	// v2 cpu.stat has user_usec and system_usec even without the cpu
	// controller enabled: the core keeps them for every cgroup.
	if data, stat := st.read(st.r.v2Root, "cpu.stat"); stat == present {
		if st.kv(data, keysCPUStat, v[:], 0b11) {
			s.CPUUserSeconds, s.CPUSystemSeconds = float64(v[0])/1e6, float64(v[1])/1e6
			s.Available |= reading.FieldCPU
		}
	}
}

// kv runs parseKV, recording a parse error or a missing required key;
// it reports whether every key in need was found.
func (st *readState) kv(data []byte, keys []string, vals []uint64, need uint64) bool {
	found, err := parseKV(data, keys, vals)
	if err != nil {
		st.fail(err)
		return false
	}
	if found&need != need {
		for i, k := range keys {
			if need&^found&(1<<i) != 0 {
				st.fail(fmt.Errorf("no %q line", k))
				break
			}
		}
		return false
	}
	return true
}

var (
	// Hierarchical totals first, the cgroup's own counts as fallback: with
	// use_hierarchy=0 (v1 only) the total_ lines are absent.
	keysMemStatV1  = []string{"total_rss", "total_cache", "total_swap", "rss", "cache", "swap"}
	keysMemStatV2  = []string{"anon", "file"}
	keysMemEvents  = []string{"max", "oom_kill"}
	keysOOMControl = []string{"oom_kill"}
)

func (st *readState) memory() {
	s, root := st.s, st.r.memory
	// The first file decides the hierarchy, so a cgroup's memory fields
	// never mix v1 and v2 sources.
	if st.uint(root, "memory.usage_in_bytes", parseSingle, &s.MemoryCurrent, reading.FieldMemoryCurrent) != absent {
		st.uint(root, "memory.limit_in_bytes", parseV1Limit, &s.MemoryLimit, reading.FieldMemoryLimit)
		if data, stat := st.read(root, "memory.stat"); stat == present {
			var v [6]uint64
			if found, err := parseKV(data, keysMemStatV1, v[:]); err != nil {
				st.fail(err)
			} else {
				st.memStatV1(found, v)
			}
		}
		st.uint(root, "memory.failcnt", parseSingle, &s.MemoryFailCount, reading.FieldMemoryFailCount)
		if data, stat := st.read(root, "memory.oom_control"); stat == present {
			var v [1]uint64
			if found, err := parseKV(data, keysOOMControl, v[:]); err != nil {
				st.fail(err)
			} else if found != 0 { // oom_kill appeared in 4.13
				s.MemoryOOMKills = v[0]
				s.Available |= reading.FieldMemoryOOMKills
			}
		}
		return
	}
	root = st.r.v2Root
	if st.uint(root, "memory.current", parseSingle, &s.MemoryCurrent, reading.FieldMemoryCurrent) == absent {
		return
	}
	st.uint(root, "memory.max", parseV2Max, &s.MemoryLimit, reading.FieldMemoryLimit)
	if data, stat := st.read(root, "memory.stat"); stat == present {
		var v [2]uint64
		if st.kv(data, keysMemStatV2, v[:], 0b11) {
			s.MemoryRSS, s.MemoryCache = v[0], v[1]
			s.Available |= reading.FieldMemoryRSS | reading.FieldMemoryCache
		}
	}
	if data, stat := st.read(root, "memory.events"); stat == present {
		var v [2]uint64
		if found, err := parseKV(data, keysMemEvents, v[:]); err != nil {
			st.fail(err)
		} else {
			if found&1 != 0 {
				s.MemoryFailCount = v[0]
				s.Available |= reading.FieldMemoryFailCount
			}
			if found&2 != 0 { // oom_kill appeared in 4.13
				s.MemoryOOMKills = v[1]
				s.Available |= reading.FieldMemoryOOMKills
			}
		}
	}
	st.uint(root, "memory.swap.current", parseSingle, &s.MemorySwap, reading.FieldMemorySwap)
}

// memStatV1 picks v1 memory.stat values, preferring each total_ line.
func (st *readState) memStatV1(found uint64, v [6]uint64) {
	s := st.s
	set := func(i int, dst *uint64, f reading.ResourceField) {
		switch {
		case found&(1<<i) != 0:
			*dst = v[i]
		case found&(1<<(i+3)) != 0:
			*dst = v[i+3]
		default:
			return
		}
		s.Available |= f
	}
	set(0, &s.MemoryRSS, reading.FieldMemoryRSS)
	set(1, &s.MemoryCache, reading.FieldMemoryCache)
	set(2, &s.MemorySwap, reading.FieldMemorySwap)
}

func (st *readState) io() {
	s, root := st.s, st.r.blkio
	// The _recursive files include descendant cgroups, like every other
	// counter here; some kernels leave the plain ones empty for a cgroup
	// whose IO all happens in children (a Slurm job above its steps). Older
	// kernels have only the plain ones.
	read := func(recursive, plain string, ops bool) (exists, ok bool) {
		data, stat := st.read(root, recursive)
		if stat == absent {
			data, stat = st.read(root, plain)
		}
		if stat != present {
			return stat != absent, false
		}
		if err := parseBlkio(data, ops, &s.IO); err != nil {
			st.fail(err)
			return true, false
		}
		return true, true
	}
	bytesExist, bytesOK := read("blkio.throttle.io_service_bytes_recursive", "blkio.throttle.io_service_bytes", false)
	opsExist, opsOK := read("blkio.throttle.io_serviced_recursive", "blkio.throttle.io_serviced", true)
	ok := bytesOK && opsOK
	if !bytesExist && !opsExist {
		if data, stat := st.read(st.r.v2Root, "io.stat"); stat == present {
			if err := parseIOStat(data, &s.IO); err != nil {
				st.fail(err)
			} else {
				ok = true
			}
		}
	}
	if !ok {
		// Half a file, or bytes without ops, would export wrong zeros.
		s.IO = s.IO[:0]
		return
	}
	s.Available |= reading.FieldIO
	sortIO(s.IO)
	for i := range s.IO {
		s.IO[i].Device = st.r.deviceName(s.IO[i].Major, s.IO[i].Minor)
	}
}

// pressureFiles is the file of each Resource.
var pressureFiles = [reading.NumPSIResources]string{"cpu.pressure", "memory.pressure", "io.pressure"}

func (st *readState) pressure() {
	s := st.s
	for res, name := range pressureFiles {
		data, stat := st.read(st.r.cpuacct, name)
		if stat == absent {
			data, stat = st.read(st.r.v2Root, name)
		}
		if stat != present {
			continue
		}
		some, full, hasFull, err := parsePressure(data)
		if err != nil {
			st.fail(err)
			continue
		}
		r := reading.PSIResource(res)
		s.PSI[r] = reading.Pressure{SomeSeconds: float64(some) / 1e6, FullSeconds: float64(full) / 1e6}
		s.Available |= r.SomeField()
		if hasFull {
			s.Available |= r.FullField()
		}
	}
}

func (st *readState) tasks() {
	s := st.s
	if st.uint(st.r.pids, "pids.current", parseSingle, &s.Tasks, reading.FieldTasks|reading.FieldTasksRecursive) != absent {
		return
	}
	if st.uint(st.r.v2Root, "pids.current", parseSingle, &s.Tasks, reading.FieldTasks|reading.FieldTasksRecursive) != absent {
		return
	}
	// Without pids, count the threads of the cgroup itself in the first
	// hierarchy that has it.
	for _, root := range [...]string{st.r.cpuacct, st.r.cpu, st.r.memory, st.r.blkio} {
		if data, stat := st.readList(root, "tasks"); stat != absent {
			if stat == present {
				s.Tasks = countLines(data)
				s.Available |= reading.FieldTasks
			}
			return
		}
	}
	if data, stat := st.readList(st.r.v2Root, "cgroup.threads"); stat == present {
		s.Tasks = countLines(data)
		s.Available |= reading.FieldTasks
	}
}

// deviceName returns the kernel name of block device maj:min from
// <sysfs>/dev/block/maj:min/uevent, or "maj:min" when that cannot be read.
func (r *Reader) deviceName(maj, min uint32) string {
	key := uint64(maj)<<32 | uint64(min)
	if n, ok := r.names[key]; ok {
		return n
	}
	r.path = append(r.path[:0], r.sysfs...)
	r.path = append(r.path, "/dev/block/"...)
	start := len(r.path)
	r.path = strconv.AppendUint(r.path, uint64(maj), 10)
	r.path = append(r.path, ':')
	r.path = strconv.AppendUint(r.path, uint64(min), 10)
	end := len(r.path)
	r.path = append(r.path, "/uevent\x00"...)
	data, buf, err := readPath(r.path, r.buf, true)
	r.buf = buf
	if err == nil {
		if name, ok := parseDevName(data); ok {
			n := string(name)
			r.names[key] = n
			delete(r.unnamed, key)
			return n
		}
	}
	if n, ok := r.unnamed[key]; ok {
		return n
	}
	n := string(r.path[start:end])
	r.unnamed[key] = n
	return n
}
