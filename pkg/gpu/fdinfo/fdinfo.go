// Package fdinfo reads the kernel's DRM client usage statistics from
// /proc/PID/fdinfo/* (Documentation/gpu/drm-usage-stats.rst) and turns
// them into per-process GPU usage per device and interval.
//
// Each open DRM file is a client with a drm-client-id unique per device
// (drm-pdev); the same client appears under every fd and process that
// shares the open file (dup, fork, SCM_RIGHTS), so clients are deduplicated
// by (drm-pdev, drm-client-id) and credited to the lowest pid holding them.
// Busy time comes as drm-engine-<class> nanoseconds (amdgpu, i915, msm, …)
// or, on xe, as drm-cycles-<class> GPU timestamp cycles with
// drm-total-cycles-<class> the cycles elapsed.
package fdinfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Client is one DRM client's cumulative counters.
type Client struct {
	PID  int
	ID   uint64
	PDev string // PCI address, as in drm-pdev
	// Driver is drm-driver ("amdgpu", "i915", "xe").
	Driver string
	// Busy is busy nanoseconds per engine class (drm-engine-<class>).
	Busy map[string]uint64
	// Capacity is drm-engine-capacity-<class> (engines of the class), 1
	// when absent.
	Capacity map[string]uint64
	// Cycles and TotalCycles are xe's drm-cycles-<class> and
	// drm-total-cycles-<class>.
	Cycles, TotalCycles map[string]uint64
}

// ClientKey identifies a client on a device.
type ClientKey struct {
	PDev string
	ID   uint64
}

// DefaultRescanEvery is how many scans a process's list of DRM fds is
// trusted before its fd directory is read again. Reading every fd's link
// of every process each interval is the costly part of a scan; a process
// that opens a GPU later is seen at most this many intervals late, and its
// busy time, being cumulative, is then counted from there.
const DefaultRescanEvery = 10

// Scanner reads DRM clients from procfs, remembering which fds of which
// processes are DRM files. Not safe for concurrent use.
type Scanner struct {
	procRoot    string
	RescanEvery int
	tick        int
	known       map[int]*procFDs
	buf         []byte
	path        []byte
	// denied counts, in the latest scan, processes whose fds could not be
	// read for lack of permission (another user's, without CAP_SYS_PTRACE).
	denied int
}

// Denied is how many processes' fds the latest scan could not read for
// lack of permission: their DRM clients are missing from it. The kernel
// guards /proc/PID/fd and fdinfo with a ptrace access check, so reading
// other users' needs CAP_SYS_PTRACE, whatever the file modes say.
func (s *Scanner) Denied() int { return s.denied }

type procFDs struct {
	// denied: its fd directory could not be read for lack of permission.
	denied   bool
	fds      []string
	scanned  int
	present  bool
	mustScan bool
}

// NewScanner reads under procRoot (/proc).
func NewScanner(procRoot string) *Scanner {
	return &Scanner{procRoot: procRoot, RescanEvery: DefaultRescanEvery, known: map[int]*procFDs{},
		buf: make([]byte, 8192)}
}

// Scan reads the DRM clients of the processes pids when it is not nil
// (the processes debugfs lists as DRM clients, see DebugfsPIDs), else of
// every process. Only fds that are DRM device files (/dev/dri/*) are read;
// which they are is remembered for RescanEvery scans. Processes that
// vanish or cannot be read are skipped: they are not an error of the scan.
func (s *Scanner) Scan(pids []int) (map[ClientKey]*Client, error) {
	s.tick++
	s.denied = 0
	if pids == nil {
		ents, err := os.ReadDir(s.procRoot)
		if err != nil {
			return nil, fmt.Errorf("fdinfo: %w", err)
		}
		for _, e := range ents {
			if pid, err := strconv.Atoi(e.Name()); err == nil && pid > 0 {
				pids = append(pids, pid)
			}
		}
	}
	for _, p := range s.known {
		p.present = false
	}
	out := map[ClientKey]*Client{}
	for _, pid := range pids {
		p := s.known[pid]
		if p == nil {
			p = &procFDs{mustScan: true}
			s.known[pid] = p
		}
		p.present = true
		name := strconv.Itoa(pid)
		if p.mustScan || s.tick-p.scanned >= s.RescanEvery {
			p.fds, p.denied = s.drmFDs(name, p.fds[:0])
			p.scanned, p.mustScan = s.tick, false
		}
		if p.denied {
			s.denied++
		}
		for _, fd := range p.fds {
			b, err := s.read(name, fd)
			if errors.Is(err, fs.ErrPermission) {
				s.denied++
				break
			}
			if err != nil {
				p.mustScan = true // closed since: look again next time
				continue
			}
			c, ok := Parse(b)
			if !ok {
				p.mustScan = true // the number now names another file
				continue
			}
			c.PID = pid
			k := ClientKey{c.PDev, c.ID}
			if old, ok := out[k]; ok && old.PID <= pid {
				continue // shared file: credited to the lowest pid
			}
			out[k] = c
		}
	}
	for pid, p := range s.known {
		if !p.present {
			delete(s.known, pid)
		}
	}
	return out, nil
}

// drmFDs lists the fds of process name that link to /dev/dri/*; denied
// says its fd directory could not be read for lack of permission.
func (s *Scanner) drmFDs(name string, into []string) ([]string, bool) {
	fdDir := filepath.Join(s.procRoot, name, "fd")
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return into, errors.Is(err, fs.ErrPermission)
	}
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
		if err == nil && strings.HasPrefix(target, "/dev/dri/") {
			into = append(into, fd.Name())
		}
	}
	return into, false
}

// read returns /proc/<name>/fdinfo/<fd> in the scanner's buffer with
// three system calls (os.ReadFile takes five: it also stats the file and
// tries to register it with the poller).
func (s *Scanner) read(name, fd string) ([]byte, error) {
	s.path = append(append(append(append(append(s.path[:0], s.procRoot...), '/'), name...), "/fdinfo/"...), fd...)
	f, err := unix.Open(string(s.path), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(f)
	n := 0
	for {
		if n == len(s.buf) {
			s.buf = append(s.buf, make([]byte, len(s.buf))...)
		}
		m, err := unix.Read(f, s.buf[n:])
		if err != nil {
			return nil, err
		}
		if m == 0 {
			return s.buf[:n], nil
		}
		n += m
		if n < len(s.buf) {
			// procfs hands a small file over in one read; a short
			// read means the end.
			return s.buf[:n], nil
		}
	}
}

// Parse reads one fdinfo file. It reports false when the file is not a DRM
// client with a pdev and a client id (other drivers' or non-DRM files).
func Parse(b []byte) (*Client, bool) {
	c := &Client{}
	var haveID bool
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || !strings.HasPrefix(key, "drm-") {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case key == "drm-driver":
			c.Driver = val
		case key == "drm-pdev":
			c.PDev = strings.ToLower(val)
		case key == "drm-client-id":
			id, err := strconv.ParseUint(val, 10, 64)
			if err != nil {
				return nil, false
			}
			c.ID, haveID = id, true
		case strings.HasPrefix(key, "drm-engine-capacity-"):
			if n, err := strconv.ParseUint(val, 10, 64); err == nil && n > 0 {
				set(&c.Capacity, strings.TrimPrefix(key, "drm-engine-capacity-"), n)
			}
		case strings.HasPrefix(key, "drm-engine-"):
			if n, ok := number(val, "ns"); ok {
				set(&c.Busy, strings.TrimPrefix(key, "drm-engine-"), n)
			}
		case strings.HasPrefix(key, "drm-total-cycles-"):
			if n, ok := number(val, ""); ok {
				set(&c.TotalCycles, strings.TrimPrefix(key, "drm-total-cycles-"), n)
			}
		case strings.HasPrefix(key, "drm-cycles-"):
			if n, ok := number(val, ""); ok {
				set(&c.Cycles, strings.TrimPrefix(key, "drm-cycles-"), n)
			}
		}
	}
	if !haveID || c.PDev == "" {
		return nil, false
	}
	return c, true
}

func set(m *map[string]uint64, k string, v uint64) {
	if *m == nil {
		*m = map[string]uint64{}
	}
	(*m)[k] = v
}

// number parses "<n> <unit>" (or a bare n when unit is "").
func number(v, unit string) (uint64, bool) {
	f := strings.Fields(v)
	if len(f) == 0 || (unit != "" && len(f) > 1 && f[1] != unit) {
		return 0, false
	}
	n, err := strconv.ParseUint(f[0], 10, 64)
	return n, err == nil
}

// DebugfsPIDs lists the processes holding DRM clients from debugfs
// (<debugfs>/dri/<minor>/clients, one table per DRM minor, root only),
// which spares reading every process's fds. ok is false when no table
// can be read (debugfs not mounted): the caller then scans every process.
func DebugfsPIDs(debugfs string) (pids []int, ok bool) {
	tables, _ := filepath.Glob(filepath.Join(debugfs, "dri", "*", "clients"))
	seen := map[int]bool{}
	for _, t := range tables {
		b, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		ok = true
		// "command tgid dev master a uid magic [name]": the command (a
		// comm, which may hold spaces) is right-aligned; the tgid is the
		// first all-digit field after it.
		lines := strings.Split(string(b), "\n")
		for _, l := range lines[min(1, len(lines)):] {
			f := strings.Fields(l)
			for i := 1; i < len(f); i++ {
				if pid, err := strconv.Atoi(f[i]); err == nil {
					if pid > 0 && !seen[pid] {
						seen[pid] = true
						pids = append(pids, pid)
					}
					break
				}
			}
		}
	}
	if ok && pids == nil {
		pids = []int{}
	}
	return pids, ok
}
