package libvirt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultDirs are where libvirtd keeps QEMU domain XML: status files of
// running domains (with their run-time id) first, then persistent
// definitions.
var DefaultDirs = []string{"/run/libvirt/qemu", "/etc/libvirt/qemu"}

// Catalog indexes the domain XML files of some directories. It re-reads a
// directory only when its modification time changed, which libvirt causes
// on every write because it replaces files by rename; within a re-read only
// files whose inode, size or mtime changed are parsed again. So a lookup costs a
// stat per directory while nothing changes. Safe for concurrent use.
type Catalog struct {
	dirs []string

	mu      sync.Mutex
	dirTime map[string]time.Time
	files   map[string]cachedFile // by path
	domains []Domain              // dirs order, then file name order
	errs    map[string]error      // by path: files that did not parse
}

type cachedFile struct {
	ino  uint64
	size int64
	mod  time.Time
	dom  Domain
	err  error
}

// NewCatalog returns a catalog of the *.xml files in dirs; earlier dirs take
// precedence when a domain appears in several.
func NewCatalog(dirs []string) *Catalog {
	return &Catalog{
		dirs:    append([]string(nil), dirs...),
		dirTime: map[string]time.Time{},
		files:   map[string]cachedFile{},
		errs:    map[string]error{},
	}
}

// Find returns the domain that a cgroup path names by run-time id (0 when
// the path has none) and machine name: the part after "qemu-<id>-" in a
// machine name, which is the domain name sanitised and maybe truncated; for
// layouts without an id, the domain name itself.
//
// A domain matches when the machine name libvirt would derive from its
// name and the path's id equals the path's, so truncated and sanitised
// names are found; with an id, a status file with that id whose name yields
// the path's machine name wins, which tells apart domains whose names only
// differ after the cut.
func (c *Catalog) Find(id int, name string) (Domain, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked()
	if id > 0 {
		want := MachineName(id, name, false)
		for _, d := range c.domains {
			if d.ID == id && matches(d, id, want) {
				return d, true
			}
		}
		for _, d := range c.domains {
			if d.ID == 0 && matches(d, id, want) {
				return d, true
			}
		}
		return Domain{}, false
	}
	for _, d := range c.domains {
		if d.Name == name {
			return d, true
		}
	}
	return Domain{}, false
}

func matches(d Domain, id int, want string) bool {
	return MachineName(id, d.Name, false) == want || MachineName(id, d.Name, true) == want
}

// FindCID returns the running domain whose vsock context id is cid: only
// status files count (a domain with a run-time id), since a stopped
// domain's definition may name an id another domain now holds, and the
// kernel gives a context id to one running guest at a time.
func (c *Catalog) FindCID(cid uint32) (Domain, bool) {
	if cid == 0 {
		return Domain{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refreshLocked()
	for _, d := range c.domains {
		if d.ID > 0 && d.VsockCID == cid {
			return d, true
		}
	}
	return Domain{}, false
}

// Err reports the files that could not be read or parsed at the last
// refresh, nil when all could.
func (c *Catalog) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	paths := make([]string, 0, len(c.errs))
	for p := range c.errs {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var errs []error
	for _, p := range paths {
		errs = append(errs, c.errs[p])
	}
	return errors.Join(errs...)
}

func (c *Catalog) refreshLocked() {
	changed := false
	for _, dir := range c.dirs {
		fi, err := os.Stat(dir)
		var mod time.Time
		if err == nil {
			mod = fi.ModTime()
		}
		if old, ok := c.dirTime[dir]; ok && old.Equal(mod) {
			continue
		}
		c.dirTime[dir] = mod
		changed = true
	}
	if !changed {
		return
	}
	seen := map[string]bool{}
	var domains []Domain
	clear(c.errs)
	for _, dir := range c.dirs {
		entries, err := os.ReadDir(dir)
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				c.errs[dir] = fmt.Errorf("libvirt XML directory: %w", err)
			}
			continue
		}
		for _, e := range entries { // sorted by name
			if e.IsDir() || !strings.HasSuffix(e.Name(), ".xml") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			seen[p] = true
			f, err := c.load(p)
			if err != nil {
				c.errs[p] = err
				continue
			}
			domains = append(domains, f.dom)
		}
	}
	for p := range c.files {
		if !seen[p] {
			delete(c.files, p)
		}
	}
	c.domains = domains
}

// load returns the parsed file, from the cache when its size and mtime are
// unchanged.
func (c *Catalog) load(p string) (cachedFile, error) {
	fi, err := os.Stat(p)
	if err != nil {
		delete(c.files, p)
		return cachedFile{}, fmt.Errorf("libvirt XML: %w", err)
	}
	// The inode tells apart a file replaced by rename within one mtime
	// tick with the same size (a status file whose id changed by a digit).
	ino := inode(fi)
	if f, ok := c.files[p]; ok && f.ino == ino && f.size == fi.Size() && f.mod.Equal(fi.ModTime()) {
		return f, f.err
	}
	f := cachedFile{ino: ino, size: fi.Size(), mod: fi.ModTime()}
	fh, err := os.Open(p)
	if err != nil {
		return cachedFile{}, fmt.Errorf("libvirt XML: %w", err)
	}
	defer fh.Close()
	f.dom, f.err = parseDomain(fh)
	if f.err != nil {
		f.err = fmt.Errorf("%s: %w", p, f.err)
	}
	f.dom.File = p
	c.files[p] = f
	return f, f.err
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// ParseID converts a path's domain id ("" when the layout has none) for Find.
func ParseID(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
