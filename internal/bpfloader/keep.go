package bpfloader

// Keeping the loaded accounting for the boot (Options.Keep).
//
// Loading the accounting costs about 40 ms of CPU: parsing the kernel's
// BTF (for the CO-RE relocations and the tracepoints' BTF ids) and the
// verifier. `wattrace measure` is a process per command and paid it on
// every start. With Keep, the first process pins the loaded programs and
// maps in a BPF file system, in a directory of the user's own, and later
// processes of the same user open the pins (a fraction of a millisecond)
// and attach the programs themselves. Nothing stays attached between
// processes: no hook runs while no process holds the programs, and each
// process detaches what it attached when it closes.
//
// What makes a kept copy trustworthy:
//   - Where: <Keep>/wattrace-measure-<euid>/<key>. Keep must be a BPF
//     file system owned by root or the user, not writable by others unless
//     sticky (a default bpffs mount is 1777, sticky); the user's directory
//     and the key's must be directories (never followed links) owned by
//     the user and writable by nobody else, and each pin must be owned by
//     the user. Anything else (another user pre-creating the path) is
//     refused with a note, and the process loads a copy of its own.
//   - What: the key hashes the object file, the constants it was loaded
//     with (the hierarchy) and the boot, so another build of wattrace or
//     another hierarchy never opens this copy. A pin cannot outlive the
//     kernel it was loaded in (a BPF file system is memory). Each program
//     must be of its spec's type and name and loaded by the user; each map
//     must match its spec and be the very map the programs use.
//   - Who: one process at a time. The programs' claims on each task's
//     runtime live in the kept task storage, so two processes reading one
//     copy would take each other's runtime. A process holds an exclusive
//     flock(2) on the key's directory while it uses the copy; a second
//     process of the same user loads its own meanwhile.
//
// The exit maps keep what the previous process left; they are emptied
// before the hooks are attached, so a kept copy starts like a new one
// (the maps cannot fill over a boot's worth of processes). The task
// storage keeps each task's claims: a new reader takes its first read as
// its baseline, so that changes nothing.
//
// A kept copy holds its maps' memory (about 7 MB of preallocated hash
// maps) until it is removed (rm -r <Keep>/wattrace-measure-<euid>) or the
// machine reboots; a new key (another build) replaces the user's older
// copies.

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// How the accounting's programs and maps were had (Kept.How).
const (
	// KeptNo: loaded by this process and unloaded when it closes them.
	KeptNo = "loaded"
	// KeptPinned: loaded by this process and kept for later processes.
	KeptPinned = "loaded and kept"
	// KeptReused: kept by an earlier process and opened.
	KeptReused = "reused"
)

// Kept says how the accounting's objects were had and, where a kept
// copy was refused or could not be used, why.
type Kept struct {
	How string
	// Dir is the kept copy's directory (KeptPinned, KeptReused).
	Dir string
	// Note says why a kept copy was neither used nor made, when that is
	// worth a warning: a path another user made, a copy in use. Empty
	// where keeping is simply unavailable (no BPF file system there, no
	// permission to make the user's directory).
	Note string
}

// keepPrefix names each user's directory under Options.Keep.
const keepPrefix = "wattrace-measure-"

// refusal is kept state that is not trusted: said as a warning.
type refusal struct{ msg string }

func (r refusal) Error() string { return r.msg }

func refused(format string, a ...any) error { return refusal{fmt.Sprintf(format, a...)} }

// brokenCopy is a kept copy of the user's own that is incomplete or does
// not match the spec: it is replaced.
type brokenCopy struct{ err error }

func (b brokenCopy) Error() string { return b.err.Error() }

// bootIDPath is the kernel's id of this boot.
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// keepKey names the copy of the accounting object loaded with consts in
// this boot.
func keepKey(consts ...uint32) (string, error) {
	boot, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("read the boot id: %w", err)
	}
	h := sha256.New()
	h.Write(_AccountingBytes)
	for _, c := range consts {
		_ = binary.Write(h, binary.LittleEndian, c)
	}
	h.Write(bytes.TrimSpace(boot))
	return hex.EncodeToString(h.Sum(nil)[:12]), nil
}

// openDir opens a directory without following a link.
func openDir(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, refused("%s is not a directory (a link or a file)", path)
		}
		return nil, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// checkOwn checks an open directory: owned by uid, writable by its owner
// alone.
func checkOwn(f *os.File, uid int) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	if int(st.Uid) != uid {
		return refused("%s is owned by uid %d, not %d", f.Name(), st.Uid, uid)
	}
	if st.Mode&0o022 != 0 {
		return refused("%s is writable by others than its owner (mode %04o)", f.Name(), st.Mode&0o7777)
	}
	return nil
}

// openUserDir opens uid's directory under root, a BPF file system,
// making it where missing if create is set (fs.ErrNotExist otherwise). An
// error that is not a refusal means keeping is not available here.
func openUserDir(root string, uid int, create bool) (*os.File, error) {
	var sfs unix.Statfs_t
	if err := unix.Statfs(root, &sfs); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", root, err)
	}
	if uint32(sfs.Type) != unix.BPF_FS_MAGIC {
		return nil, fmt.Errorf("%s is not a BPF file system", root)
	}
	var st unix.Stat_t
	if err := unix.Stat(root, &st); err != nil {
		return nil, fmt.Errorf("stat %s: %w", root, err)
	}
	if st.Uid != 0 && int(st.Uid) != uid {
		return nil, refused("%s is owned by uid %d, neither root nor %d", root, st.Uid, uid)
	}
	if st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0 {
		return nil, refused("%s is writable by others and not sticky (mode %04o): another user could replace what is kept there", root, st.Mode&0o7777)
	}
	p := filepath.Join(root, keepPrefix+strconv.Itoa(uid))
	f, err := openDir(p)
	if errors.Is(err, fs.ErrNotExist) && create {
		if err := unix.Mkdir(p, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, &fs.PathError{Op: "mkdir", Path: p, Err: err}
		}
		f, err = openDir(p)
	}
	if err != nil {
		return nil, err
	}
	if err := checkOwn(f, uid); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// lockDir opens dir and takes its exclusive lock without waiting;
// unix.EWOULDBLOCK when another process holds it.
func lockDir(path string, uid int) (*os.File, error) {
	f, err := openDir(path)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, err
	}
	// What was locked must be what the path names now: a directory
	// removed and made again in between is another one.
	var a, b unix.Stat_t
	if unix.Fstat(int(f.Fd()), &a) != nil || unix.Lstat(path, &b) != nil || a.Dev != b.Dev || a.Ino != b.Ino {
		f.Close()
		return nil, unix.EWOULDBLOCK
	}
	if err := checkOwn(f, uid); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// internalMap: a map of the object's data sections (.rodata, .bss),
// which the programs hold; never pinned or read.
func internalMap(name string) bool { return strings.HasPrefix(name, ".") }

// checkPin: a pin (not a link) owned by uid.
func checkPin(path string, uid int) error {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return brokenCopy{fmt.Errorf("stat %s: %w", path, err)}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return refused("%s is not a pinned object (mode %o)", path, st.Mode)
	}
	if int(st.Uid) != uid {
		return refused("%s is owned by uid %d, not %d", path, st.Uid, uid)
	}
	return nil
}

// openKept opens the copy kept in dir, checked against spec.
func openKept(dir string, spec *ebpf.CollectionSpec, uid int) (*ebpf.Collection, error) {
	coll := &ebpf.Collection{Programs: map[string]*ebpf.Program{}, Maps: map[string]*ebpf.Map{}}
	fail := func(err error) (*ebpf.Collection, error) {
		coll.Close()
		return nil, err
	}
	used := map[ebpf.MapID]bool{}
	for name, ps := range spec.Programs {
		path := filepath.Join(dir, name)
		if slices.Contains(optionalPrograms, name) {
			// Kept without it: this kernel refused it when the copy
			// was made.
			if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
				continue
			}
		}
		if err := checkPin(path, uid); err != nil {
			return fail(err)
		}
		p, err := ebpf.LoadPinnedProgram(path, nil)
		if err != nil {
			return fail(brokenCopy{fmt.Errorf("open %s: %w", path, err)})
		}
		coll.Programs[name] = p
		info, err := p.Info()
		if err != nil {
			return fail(brokenCopy{fmt.Errorf("%s: %w", path, err)})
		}
		if p.Type() != ps.Type || info.Name == "" || !strings.HasPrefix(name, info.Name) {
			return fail(brokenCopy{fmt.Errorf("%s is a %s program named %q, not the %s program %s", path, p.Type(), info.Name, ps.Type, name)})
		}
		if by, ok := info.CreatedByUID(); ok && int(by) != uid {
			return fail(refused("%s was loaded by uid %d, not %d", path, by, uid))
		}
		ids, _ := info.MapIDs()
		for _, id := range ids {
			used[id] = true
		}
	}
	for name, ms := range spec.Maps {
		if internalMap(name) {
			continue
		}
		path := filepath.Join(dir, name)
		if err := checkPin(path, uid); err != nil {
			return fail(err)
		}
		m, err := ebpf.LoadPinnedMap(path, nil)
		if err != nil {
			return fail(brokenCopy{fmt.Errorf("open %s: %w", path, err)})
		}
		coll.Maps[name] = m
		if err := ms.Compatible(m); err != nil {
			return fail(brokenCopy{fmt.Errorf("%s: %w", path, err)})
		}
		// The map read must be the one the programs write.
		info, err := m.Info()
		if err != nil {
			return fail(brokenCopy{fmt.Errorf("%s: %w", path, err)})
		}
		if id, ok := info.ID(); !ok || !used[id] {
			return fail(brokenCopy{fmt.Errorf("%s is not a map the kept programs use", path)})
		}
	}
	return coll, nil
}

// pinAll pins coll's programs and maps in dir.
func pinAll(coll *ebpf.Collection, dir string) error {
	for name, p := range coll.Programs {
		if err := p.Pin(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	for name, m := range coll.Maps {
		if internalMap(name) {
			continue
		}
		if err := m.Pin(filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// emptyExitMaps empties the hash maps of a kept copy, whose entries the
// previous process left.
func emptyExitMaps(coll *ebpf.Collection) error {
	for name, m := range coll.Maps {
		switch m.Type() {
		case ebpf.Hash, ebpf.LRUHash:
		default:
			continue
		}
		k, v := make([]byte, m.KeySize()), make([]byte, m.ValueSize())
		var keys [][]byte
		it := m.Iterate()
		for it.Next(&k, &v) {
			keys = append(keys, bytes.Clone(k))
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("empty %s: %w", name, err)
		}
		for _, key := range keys {
			if err := m.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				return fmt.Errorf("empty %s: %w", name, err)
			}
		}
	}
	return nil
}

// removeOthers removes the user's kept copies other than key's (older
// builds, other hierarchies, a crashed process's half-made one), each
// only while its lock can be taken.
func removeOthers(user *os.File, key string, uid int) {
	names, err := user.Readdirnames(-1)
	if err != nil {
		return
	}
	for _, n := range names {
		if n == key {
			continue
		}
		p := filepath.Join(user.Name(), n)
		f, err := lockDir(p, uid)
		if err != nil {
			continue
		}
		_ = os.RemoveAll(p)
		f.Close()
	}
}

// keep opens the copy of spec kept under root for the euid, or loads
// spec and keeps it there. It returns the objects (a collection whose
// programs and maps the caller assigns), how they were had, and the
// lock to hold while they are used (nil when not kept). A failure to
// load is the only error: anything wrong with keeping falls back to a
// load of this process's own, said in Kept.Note where it deserves a
// warning.
func keep(root string, spec *ebpf.CollectionSpec, consts ...uint32) (*ebpf.Collection, Kept, *os.File, error) {
	uid := os.Geteuid()
	private := func(note error) (*ebpf.Collection, Kept, *os.File, error) {
		k := Kept{How: KeptNo}
		var r refusal
		if errors.As(note, &r) {
			k.Note = "not keeping the BPF programs loaded for later measures: " + r.msg
		}
		coll, _, err := newCollection(spec)
		return coll, k, nil, err
	}
	key, err := keepKey(consts...)
	if err != nil {
		return private(err)
	}
	// The user's directory is made only once the programs have loaded:
	// a user who cannot load them leaves nothing behind.
	user, err := openUserDir(root, uid, false)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return private(err)
	}
	if user != nil {
		defer user.Close()
		dir := filepath.Join(user.Name(), key)
		lock, err := lockDir(dir, uid)
		switch {
		case err == nil:
			coll, err := openKept(dir, spec, uid)
			if err == nil {
				if err := emptyExitMaps(coll); err != nil {
					coll.Close()
					lock.Close()
					return private(err)
				}
				return coll, Kept{How: KeptReused, Dir: dir}, lock, nil
			}
			var b brokenCopy
			if !errors.As(err, &b) {
				lock.Close()
				return private(err)
			}
			// Ours, and locked: replace it.
			_ = os.RemoveAll(dir)
			lock.Close()
		case errors.Is(err, unix.EWOULDBLOCK):
			return private(refused("the copy kept in %s is in use by another measure", dir))
		case !errors.Is(err, fs.ErrNotExist):
			return private(err)
		}
		removeOthers(user, key, uid)
	}

	coll, _, err := newCollection(spec)
	if err != nil {
		return nil, Kept{}, nil, err
	}
	if user == nil {
		if user, err = openUserDir(root, uid, true); err != nil {
			k := Kept{How: KeptNo}
			var r refusal
			if errors.As(err, &r) {
				k.Note = "not keeping the BPF programs loaded for later measures: " + r.msg
			}
			return coll, k, nil, nil
		}
		defer user.Close()
	}
	dir := filepath.Join(user.Name(), key)
	// (A BPF file system refuses names with a dot.)
	tmp := fmt.Sprintf("%s-new-%d", dir, os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := unix.Mkdir(tmp, 0o700); err != nil {
		return coll, Kept{How: KeptNo}, nil, nil
	}
	lock, err := lockDir(tmp, uid)
	if err == nil {
		err = pinAll(coll, tmp)
	}
	if err == nil {
		// Whole or not at all: a second process that made its own copy
		// meanwhile finds this one in place (the rename fails on a
		// directory that is not empty) and keeps its own to itself.
		err = os.Rename(tmp, dir)
	}
	if err != nil {
		if lock != nil {
			lock.Close()
		}
		_ = os.RemoveAll(tmp)
		return coll, Kept{How: KeptNo}, nil, nil
	}
	return coll, Kept{How: KeptPinned, Dir: dir}, lock, nil
}

// assignKept fills a's objects from the copy kept under root (keep).
func (a *Accounting) assignKept(root string, spec *ebpf.CollectionSpec, consts ...uint32) error {
	coll, k, lock, err := keep(root, spec, consts...)
	if err != nil {
		return err
	}
	defer coll.Close() // what was not assigned
	if err := a.assign(coll); err != nil {
		if lock != nil {
			lock.Close()
		}
		return err
	}
	a.kept, a.keepLock = k, lock
	return nil
}

// Kept says how the programs and maps were had: loaded, loaded and kept
// for later processes, or reused (Options.Keep).
func (a *Accounting) Kept() Kept { return a.kept }

// release lets the next process have the kept copy.
func (a *Accounting) release() error {
	if a.keepLock == nil {
		return nil
	}
	err := a.keepLock.Close()
	a.keepLock = nil
	return err
}
