package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ErrUsageUnavailable is returned by Usage when the key hierarchy is the v1
// cpu controller without cpuacct: that controller keeps no usage counter.
var ErrUsageUnavailable = errors.New("cgroup CPU usage needs the cpuacct controller")

// minRescan bounds how often a miss in Path may walk the hierarchy, so a
// stream of unknown ids (stale BPF map entries, say) cannot make every call
// walk the whole tree.
const minRescan = time.Second

// missRetry is how long an id that a walk did not find is answered "unknown"
// without walking again. Ids of cgroups gone before they were resolved (a
// task's exit record read after its cgroup was removed) otherwise walked the
// whole tree every interval: 30% of the exporter's CPU with 200 Slurm jobs
// (docs/performance.md). A cgroup exists before any task can be in it, so
// a walk after the id was seen finds a live one.
const missRetry = 30 * time.Second

// Resolver maps a hierarchy's cgroup ids to paths relative to its root ("/"
// for the root, "/a/b" below it) and back. It is safe for concurrent use.
type Resolver struct {
	h         Hierarchy
	minRescan time.Duration
	now       func() time.Time

	// walkMu serialises walks, so concurrent misses share one walk instead
	// of each starting their own; it also guards lastWalk and walks.
	walkMu   sync.Mutex
	lastWalk time.Time
	walks    int
	// misses are ids the latest walks did not find.
	misses map[uint64]miss

	mu    sync.RWMutex
	paths map[uint64]string
}

// miss is an id a walk did not find: when, and whether that walk read
// the whole hierarchy (a walk that could not read part of it may have
// missed a live cgroup there).
type miss struct {
	at       time.Time
	complete bool
}

// NewResolver returns a resolver for h with an empty cache; the first miss
// walks the hierarchy.
func NewResolver(h Hierarchy) *Resolver {
	return &Resolver{h: h, minRescan: minRescan, now: time.Now, paths: map[uint64]string{}}
}

// Hierarchy returns the hierarchy the resolver maps.
func (r *Resolver) Hierarchy() Hierarchy { return r.h }

// Path returns the path of the cgroup with the given id. On a cache miss it
// rescans the hierarchy, at most once per second; it returns false if the id
// is still unknown.
func (r *Resolver) Path(id uint64) (string, bool) {
	if p, ok := r.lookup(id); ok {
		return p, true
	}
	r.walkMu.Lock()
	defer r.walkMu.Unlock()
	// Another caller may have walked while we waited for the lock.
	if p, ok := r.lookup(id); ok {
		return p, true
	}
	now := r.now()
	if !r.lastWalk.IsZero() && now.Sub(r.lastWalk) < r.minRescan {
		return "", false
	}
	if m, ok := r.misses[id]; ok && now.Sub(m.at) < missRetry {
		return "", false
	}
	_, complete, err := r.walk()
	if err != nil {
		return "", false
	}
	p, ok := r.lookup(id)
	if !ok {
		if r.misses == nil {
			r.misses = map[uint64]miss{}
		}
		for m, t := range r.misses {
			if now.Sub(t.at) >= missRetry {
				delete(r.misses, m)
			}
		}
		r.misses[id] = miss{at: now, complete: complete}
	}
	return p, ok
}

// Gone reports whether a walk of the whole hierarchy, run by Path after
// the id was asked for, did not find it (within the last missRetry). The
// caller had the id from something the cgroup's existence preceded (a
// task's record, a reading), and the kernel never gives a cgroup id to
// another cgroup, so a gone id will never be named: a caller that keeps
// being handed it (the accounting reports a removed cgroup's final
// counters for many reads) should stop asking. False when Path has not
// walked for it (the rate limit) or the walk could not read every cgroup.
func (r *Resolver) Gone(id uint64) bool {
	r.walkMu.Lock()
	defer r.walkMu.Unlock()
	m, ok := r.misses[id]
	return ok && m.complete && r.now().Sub(m.at) < missRetry
}

// Walks is how many times the resolver has walked the hierarchy.
func (r *Resolver) Walks() int {
	r.walkMu.Lock()
	defer r.walkMu.Unlock()
	return r.walks
}

// Known returns the path of an id already in the cache, never walking.
func (r *Resolver) Known(id uint64) (string, bool) { return r.lookup(id) }

func (r *Resolver) lookup(id uint64) (string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.paths[id]
	return p, ok
}

// ID returns the id of the cgroup at rel: the inode number of its directory.
// It also caches the id's path, so Path finds it without a walk.
func (r *Resolver) ID(rel string) (uint64, error) {
	rel, err := cleanRel(rel)
	if err != nil {
		return 0, err
	}
	p := r.abs(rel)
	fi, err := os.Stat(p)
	if err != nil {
		return 0, fmt.Errorf("stat cgroup: %w", err)
	}
	if !fi.IsDir() {
		return 0, fmt.Errorf("cgroup %s is not a directory", p)
	}
	id, err := inode(fi)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", p, err)
	}
	r.mu.Lock()
	r.paths[id] = rel
	r.mu.Unlock()
	return id, nil
}

// Usage returns the cgroup's hierarchical CPU usage in ns (its own tasks and
// all its descendants'): cpuacct.usage for cpuacct, cpu.stat usage_usec×1000
// for v2. The v1 cpu controller keeps no usage of its own; there Usage reads
// cpuacct.usage only if cpuacct is comounted with cpu, and otherwise returns
// an error wrapping ErrUsageUnavailable.
func (r *Resolver) Usage(rel string) (uint64, error) {
	rel, err := cleanRel(rel)
	if err != nil {
		return 0, err
	}
	dir := r.abs(rel)
	switch r.h.Kind {
	case V2:
		p := filepath.Join(dir, "cpu.stat")
		data, err := os.ReadFile(p)
		if err != nil {
			return 0, fmt.Errorf("read %s: %w", p, err)
		}
		us, err := parseCPUStatUsage(data)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", p, err)
		}
		return us * 1000, nil
	case CPUAcct, CPU:
		p := filepath.Join(dir, "cpuacct.usage")
		data, err := os.ReadFile(p)
		if err != nil {
			if r.h.Kind == CPU && errors.Is(err, fs.ErrNotExist) {
				if _, serr := os.Stat(dir); serr == nil {
					return 0, fmt.Errorf("cgroup %s: hierarchy is v1 cpu without cpuacct: %w", rel, ErrUsageUnavailable)
				}
			}
			return 0, fmt.Errorf("read %s: %w", p, err)
		}
		ns, err := parseUint(data)
		if err != nil {
			return 0, fmt.Errorf("parse %s: %w", p, err)
		}
		return ns, nil
	default:
		return 0, fmt.Errorf("unknown cgroup hierarchy kind %q", r.h.Kind)
	}
}

// Node is one cgroup found by Scan.
type Node struct {
	ID     uint64
	Parent uint64 // 0 for the root
	Path   string // relative to the hierarchy root
}

// Scan walks the whole hierarchy, rebuilds the id cache from what it finds
// (dropping removed cgroups) and returns the cgroups in pre-order, so every
// parent comes before its children. Cgroups removed while the walk runs are
// left out rather than reported as errors; only failing to read the root is
// an error. Scan is not rate-limited: it is meant for callers that need the
// tree anyway, and it saves Path a walk.
func (r *Resolver) Scan() ([]Node, error) {
	r.walkMu.Lock()
	defer r.walkMu.Unlock()
	nodes, _, err := r.walk()
	return nodes, err
}

// walk rebuilds the cache from the hierarchy; walkMu must be held.
// complete is false when some cgroup that exists could not be read.
func (r *Resolver) walk() (nodes []Node, complete bool, err error) {
	root := filepath.Clean(r.h.Mount)
	complete = true
	ids := map[string]uint64{}
	paths := map[uint64]string{}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			// A cgroup removed or unreadable mid-walk: leave out its subtree.
			if !errors.Is(err, fs.ErrNotExist) {
				complete = false
			}
			if d != nil && d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.IsDir() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if p == root {
				return err
			}
			if !errors.Is(err, fs.ErrNotExist) {
				complete = false
			}
			return filepath.SkipDir
		}
		id, err := inode(fi)
		if err != nil {
			return err
		}
		rel := "/"
		if p != root {
			rel = "/" + filepath.ToSlash(p[len(root)+1:])
			if root == "/" {
				rel = p
			}
		}
		var parent uint64
		if rel != "/" {
			parent = ids[path.Dir(rel)]
		}
		ids[rel] = id
		paths[id] = rel
		nodes = append(nodes, Node{ID: id, Parent: parent, Path: rel})
		return nil
	})
	r.lastWalk = r.now()
	r.walks++
	if err != nil {
		return nil, false, fmt.Errorf("walk cgroup hierarchy %s: %w", root, err)
	}
	r.mu.Lock()
	r.paths = paths
	r.mu.Unlock()
	return nodes, complete, nil
}

func (r *Resolver) abs(rel string) string {
	if rel == "/" {
		return filepath.Clean(r.h.Mount)
	}
	return filepath.Join(r.h.Mount, rel)
}

// cleanRel checks that rel names a cgroup inside the hierarchy and returns
// it in canonical form.
func cleanRel(rel string) (string, error) {
	if _, ok := validPath(rel); !ok {
		return "", fmt.Errorf("cgroup path %q: want an absolute path without \"..\"", rel)
	}
	return path.Clean(rel), nil
}

func inode(fi fs.FileInfo) (uint64, error) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("no inode number in %T", fi.Sys())
	}
	return st.Ino, nil
}

// Exists reports whether the cgroup id still exists at rel: its directory
// is there and is still that cgroup (a cgroup removed and created again
// under the same path has a new id). The cache keeps ids of removed
// cgroups until a walk, so Path alone can't tell a live cgroup from a gone
// one; a gone id is dropped from the cache here.
func (r *Resolver) Exists(id uint64, rel string) bool {
	rel, err := cleanRel(rel)
	if err != nil {
		return false
	}
	fi, err := os.Stat(r.abs(rel))
	if err == nil {
		if got, err := inode(fi); err == nil && got == id {
			return true
		}
	}
	r.mu.Lock()
	if r.paths[id] == rel {
		delete(r.paths, id)
	}
	r.mu.Unlock()
	return false
}
