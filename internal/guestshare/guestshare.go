// Package guestshare publishes, on a libvirt host, each VM's energy to that
// guest alone: one directory per domain under the configured root, in the
// format of pkg/power/hostshare, shared read-only with the guest over
// virtio-9p or virtiofs, or served over vsock (vsock.go) to hosts that
// cannot share a directory (docs/vm.md). It reads published snapshots only.
//
// What a guest gets: per zone, the VM's dynamic energy plus the idle energy
// the host's power.idle-policy attributed to it (none under "none"). That
// is what the VM cost the host by the host's own rules, so the VMs' shares
// and the host's unattributed energy add up to the host's zones.
//
// The counters never go back: a new writer (an exporter restart) continues
// from what the files hold, and a domain whose host-side figures restart
// (it left the snapshot after retention and came back, or a domain
// restarted under the same uuid) continues too. Only a directory whose
// files cannot be read is started again from zero, under a new epoch with
// its reset count raised (hostshare.Meta), so a guest knows.
package guestshare

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// Snapshots is what the writer needs of the stats loop: a snapshot no older
// than maxAge, the loop stepping first if its latest is older. (A loop on
// a fixed timer returns its latest; one that steps on demand steps.)
type Snapshots interface {
	Fresh(maxAge time.Duration) *snapshot.Snapshot
}

// Config configures the writer.
type Config struct {
	// Dir is the root (guests.share.path); each domain gets
	// Dir/uuid-<uuid>, or Dir/name-<name> when libvirt gave no uuid
	// (DirName).
	Dir string
	// Interval is how often the shares are written (guests.share.interval).
	Interval time.Duration
	// Group, when set (guests.share.group: a group name or a numeric
	// gid), makes the domains' directories 0750 and their files 0640,
	// owned by that group (QEMU's, e.g. kvm or libvirt-qemu): only QEMU
	// reads the shares, not every local user. Empty: 0755 and 0644.
	Group string
	// IdlePolicy is the host's power.idle-policy, recorded in the metadata.
	IdlePolicy string
	// VsockPort, when not 0 (guests.share.vsock-port), also serves each
	// domain's share over vsock on that port (vsock.go): on a Unix socket
	// per domain for hybrid vsock, and on AF_VSOCK, by the peer's context
	// id (CIDs), on a host with vhost-vsock. 1 to hostshare.MaxVsockPort.
	VsockPort int
	// CIDs names the running domain of a vsock context id (libvirt's
	// <vsock><cid address>); nil serves hybrid vsock only.
	CIDs CIDFunc
	// Host and BootID name the host (os.Hostname and the kernel's boot id
	// when empty).
	Host, BootID string
	Log          *zap.Logger
}

// LockFile is the writer's lock in the root: one exporter at a time
// writes a root's shares. Domain directories never start with a dot, so
// no domain can be named like it.
const LockFile = ".lock"

// ErrLocked is returned by New when another process holds the root's lock.
var ErrLocked = errors.New("another process writes the guests' shares here")

// Writer writes the shares. Write and Run are called from one goroutine.
type Writer struct {
	cfg     Config
	lock    *os.File // holds the root's flock for the writer's life
	perm    hostshare.Perm
	dirMode os.FileMode
	doms    map[string]*domain
	last    time.Time
	warn    map[string]bool
	uuid    int // label indexes of the vm level
	name    int
	srv     *server // nil unless VsockPort is set
}

type domain struct {
	dir   string
	meta  hostshare.Meta
	zones map[string]*counter
}

type counter struct {
	totalJ float64 // what the file holds
	// prevJ is the host's figure of the latest snapshot, this run, for
	// each series of the zone: when the host's zone changes source or
	// method, the VM's energy goes on in a series of the new labels,
	// counting from zero, and the zone's counter is their sum.
	prevJ map[snapshot.ZoneSeries]float64
}

// safeKey is what a domain's identifier may be to name a directory: a
// uuid or a libvirt name without path separators or leading dots.
var safeKey = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$`)

// The prefixes of a domain's directory say which identifier names it. A
// libvirt name is the domain owner's choice and may be spelled like
// another domain's uuid; prefixed, the two can never name one directory,
// so no domain writes into another's share.
const (
	uuidPrefix = "uuid-"
	namePrefix = "name-"
)

// DirName is the directory of a domain's share under the root:
// uuid-<lower-case uuid>, or name-<name> when libvirt gave no uuid; ""
// when the identifier is not safe in a file name.
func DirName(uuid, name string) string {
	if uuid != "" {
		if !safeKey.MatchString(uuid) {
			return ""
		}
		return uuidPrefix + strings.ToLower(uuid)
	}
	if !safeKey.MatchString(name) {
		return ""
	}
	return namePrefix + name
}

// New checks cfg and returns a writer; the root is created if missing.
func New(cfg Config) (*Writer, error) {
	if cfg.Dir == "" {
		return nil, errors.New("guests.share.path: empty")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("invalid value %q for guests.share.interval: must be > 0", cfg.Interval)
	}
	if err := checkVsockPort(cfg.VsockPort); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("guests.share.path %s: %w", cfg.Dir, err)
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	perm, dirMode := hostshare.WorldReadable, os.FileMode(0o755)
	if cfg.Group != "" {
		gid, err := lookupGroup(cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("invalid value %q for guests.share.group: %w", cfg.Group, err)
		}
		perm, dirMode = hostshare.Perm{Mode: 0o640, Gid: gid}, 0o750
	}
	lock, err := lockRoot(cfg.Dir)
	if err != nil {
		return nil, err
	}
	var srv *server
	if cfg.VsockPort > 0 {
		sockMode := os.FileMode(0o666) // connecting takes write permission; readable by all, as the files
		if perm.Gid >= 0 {
			sockMode = 0o660
		}
		srv = newServer(uint32(cfg.VsockPort), sockMode, perm.Gid, cfg.CIDs, cfg.Log)
		if err := srv.listenVsock(); err != nil {
			lock.Close()
			return nil, fmt.Errorf("guests.share.vsock-port: %w", err)
		}
	}
	if cfg.Host == "" {
		cfg.Host, _ = os.Hostname()
	}
	if cfg.BootID == "" {
		if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
			cfg.BootID = strings.TrimSpace(string(b))
		}
	}
	w := &Writer{cfg: cfg, lock: lock, srv: srv, perm: perm, dirMode: dirMode, doms: map[string]*domain{}, warn: map[string]bool{}, uuid: -1, name: -1}
	for i, n := range ident.LabelNames(ident.KindVM) {
		switch n {
		case "vm_uuid":
			w.uuid = i
		case "vm":
			w.name = i
		}
	}
	return w, nil
}

// lookupGroup resolves a group name or a numeric gid.
func lookupGroup(g string) (int, error) {
	if n, err := strconv.Atoi(g); err == nil {
		if n < 0 {
			return 0, errors.New("negative gid")
		}
		return n, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(gr.Gid)
}

// lockRoot takes the root's writer lock, an exclusive flock(2) on
// dir/LockFile without waiting. Two writers on one root would each
// continue the counters from what they last read and overwrite each
// other's totals, so the second one must not start: a guest would see its
// counter jump back and forth. The lock goes with the process (the kernel
// releases it when the exporter exits, however it exits), so there is no
// stale lock to clean up. The file holds the holder's pid, for the error.
func lockRoot(dir string) (*os.File, error) {
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("guests.share.path lock %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			holder := "unknown"
			if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				holder = strings.TrimSpace(string(b))
			}
			return nil, fmt.Errorf("guests.share.path %s: %w (lock %s held by pid %s); stop it, or give this exporter another guests.share.path",
				dir, ErrLocked, path, holder)
		}
		return nil, fmt.Errorf("guests.share.path lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// Close releases the root's lock; the writer writes nothing after it.
func (w *Writer) Close() error {
	if w.lock == nil {
		return nil
	}
	if w.srv != nil {
		w.srv.close()
	}
	err := w.lock.Close()
	w.lock = nil
	return err
}

// Run writes every Interval until ctx ends, then once more from the latest
// snapshot, so a stopped exporter leaves its final figures; then it
// releases the root's lock.
func (w *Writer) Run(ctx context.Context, src Snapshots) error {
	defer w.Close()
	t := time.NewTicker(w.cfg.Interval)
	defer t.Stop()
	var logged, warnedOld time.Time
	write := func() {
		s := src.Fresh(w.cfg.Interval)
		if s != nil && time.Since(s.Time) > 2*w.cfg.Interval && time.Since(warnedOld) >= time.Minute {
			// The loop gave an older snapshot than asked: the guests'
			// shares lag, and go stale in the guests if it lasts.
			warnedOld = time.Now()
			w.cfg.Log.Warn("the stats loop's snapshot is older than guests.share.interval allows",
				zap.Duration("age", time.Since(s.Time)), zap.Duration("interval", w.cfg.Interval))
		}
		if err := w.Write(s); err != nil && time.Since(logged) >= time.Minute {
			logged = time.Now()
			w.cfg.Log.Warn("writing guest shares", zap.String("dir", w.cfg.Dir), zap.Error(err))
		}
	}
	for {
		select {
		case <-ctx.Done():
			write()
			return nil
		case <-t.C:
			write()
		}
	}
}

// Write publishes the VMs of one snapshot; a snapshot already written is
// skipped. It returns the errors of the domains it could not write; the
// others are written regardless.
func (w *Writer) Write(s *snapshot.Snapshot) error {
	if w.lock == nil {
		return errors.New("guest shares: writer closed")
	}
	if s == nil || !s.Time.After(w.last) {
		return nil
	}
	w.last = s.Time
	var errs []error
	for i := range s.Workloads {
		wl := &s.Workloads[i]
		if wl.Level != string(ident.KindVM) {
			continue
		}
		var uuid, name string
		if w.uuid >= 0 && w.uuid < len(wl.Labels) {
			uuid = wl.Labels[w.uuid]
		}
		if w.name >= 0 && w.name < len(wl.Labels) {
			name = wl.Labels[w.name]
		}
		key := DirName(uuid, name)
		if key == "" {
			if id := uuid + "\x00" + name; !w.warn[id] {
				w.warn[id] = true
				w.cfg.Log.Warn("VM not shared: its uuid or name is not a safe directory name", zap.String("uuid", uuid), zap.String("name", name))
			}
			continue
		}
		if err := w.domain(key, uuid, name, s, wl); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (w *Writer) domain(key, uuid, name string, s *snapshot.Snapshot, wl *snapshot.Workload) error {
	d := w.doms[key]
	if d == nil {
		var err error
		w.migrate(key, uuid, name)
		if d, err = w.load(key); err != nil {
			return err
		}
		w.doms[key] = d
	}
	d.meta.Domain = hostshare.Domain{Name: name, UUID: uuid}
	for _, e := range wl.Energy {
		cur := e.DynamicJ + e.IdleJ
		if err := reading.CheckGauge(cur, 0); err != nil || math.IsInf(cur, 0) {
			continue // a snapshot's figures are validated; never publish one that is not
		}
		c := d.zones[e.Zone]
		if c == nil {
			c = &counter{}
			d.zones[e.Zone] = c
		}
		if c.prevJ == nil {
			c.prevJ = map[snapshot.ZoneSeries]float64{}
		}
		k := e.Series()
		if prev := c.prevJ[k]; cur >= prev {
			c.totalJ += cur - prev
		} else {
			// The host's figure restarted (the domain left the snapshot
			// and came back): what it holds now is all new.
			c.totalJ += cur
		}
		c.prevJ[k] = cur
	}
	zones := make([]hostshare.Zone, 0, len(d.zones))
	for _, zn := range slices.Sorted(maps.Keys(d.zones)) {
		z := hostshare.Zone{Name: zn, IdlePolicy: w.cfg.IdlePolicy, Method: "measured"}
		for _, nz := range s.Zones {
			if nz.Name == zn {
				z.Source = nz.Source
				if nz.Estimated {
					z.Method = "estimated"
				}
				break
			}
		}
		zones = append(zones, z)
	}
	if len(zones) == 0 {
		return nil
	}
	if err := w.mkdir(d.dir); err != nil {
		return fmt.Errorf("guest share %s: %w", d.dir, err)
	}
	d.meta.Zones = zones
	d.meta.Updated = s.Time
	d.meta.Seq++
	d.meta.IntervalSeconds = w.cfg.Interval.Seconds()
	d.meta.Host, d.meta.BootID = w.cfg.Host, w.cfg.BootID
	joules := make(map[string]float64, len(d.zones))
	for z, c := range d.zones {
		joules[z] = c.totalJ
	}
	if err := hostshare.WritePerm(d.dir, &d.meta, joules, w.perm); err != nil {
		return err
	}
	if w.srv != nil {
		// What the directory now holds, for the guests that read it
		// over vsock.
		frame, err := hostshare.EncodeFrame(&d.meta, joules)
		if err != nil {
			return fmt.Errorf("guest share %s: %w", d.dir, err)
		}
		w.srv.publish(key, d.dir, frame)
	}
	return nil
}

// mkdir makes a domain's directory with the writer's mode and group, and
// sets them on one that exists (made by hand, as docs/vm.md says, or
// before guests.share.group was set), so that its files are reachable by
// QEMU's group and no one else.
func (w *Writer) mkdir(dir string) error {
	if err := os.Mkdir(dir, w.dirMode); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	if w.perm.Gid < 0 {
		return nil // the default leaves an existing directory's mode alone, as it always did
	}
	if err := os.Chown(dir, -1, w.perm.Gid); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm() != w.dirMode {
		return os.Chmod(dir, w.dirMode)
	}
	return nil
}

// migrate moves a share written before directories were prefixed
// (<root>/<uuid>, or <root>/<name> without a uuid) to its prefixed name,
// so its counters continue, and leaves a symlink at the old name, so a
// domain XML naming the old path still mounts the share at its next start.
// A running guest keeps reading: QEMU's 9p and virtiofsd hold the shared
// directory open, not its path. Only a directory whose metadata names
// this very domain moves: one a domain named like a uuid wrote into
// another's place is left alone, and its true owner starts afresh.
func (w *Writer) migrate(key, uuid, name string) {
	newDir := filepath.Join(w.cfg.Dir, key)
	if _, err := os.Lstat(newDir); !errors.Is(err, os.ErrNotExist) {
		return
	}
	old := strings.ToLower(uuid)
	if uuid == "" {
		old = name
	}
	oldDir := filepath.Join(w.cfg.Dir, old)
	if fi, err := os.Lstat(oldDir); err != nil || !fi.IsDir() {
		return
	}
	meta, err := hostshare.ReadMeta(oldDir)
	if err != nil {
		return
	}
	if uuid != "" && !strings.EqualFold(meta.Domain.UUID, uuid) || uuid == "" && (meta.Domain.UUID != "" || meta.Domain.Name != name) {
		if !w.warn["migrate\x00"+oldDir] {
			w.warn["migrate\x00"+oldDir] = true
			w.cfg.Log.Warn("old unprefixed guest share names another domain: not moved", zap.String("dir", oldDir),
				zap.String("its_uuid", meta.Domain.UUID), zap.String("its_name", meta.Domain.Name))
		}
		return
	}
	if err := os.Rename(oldDir, newDir); err != nil {
		w.cfg.Log.Warn("moving an old guest share to its prefixed name", zap.String("from", oldDir), zap.String("to", newDir), zap.Error(err))
		return
	}
	if err := os.Symlink(key, oldDir); err != nil {
		w.cfg.Log.Warn("linking the old guest share's name to the new", zap.String("link", oldDir), zap.Error(err))
	}
	w.cfg.Log.Info("guest share moved to its prefixed name; point the domain's XML at it", zap.String("from", oldDir), zap.String("to", newDir))
}

// load opens a domain's directory: its counters continue from what the
// files hold, or start from zero under a new epoch when they can't.
func (w *Writer) load(key string) (*domain, error) {
	d := &domain{dir: filepath.Join(w.cfg.Dir, key), zones: map[string]*counter{},
		meta: hostshare.Meta{Version: hostshare.Version}}
	meta, err := hostshare.ReadMeta(d.dir)
	if errors.Is(err, os.ErrNotExist) {
		left, _ := filepath.Glob(filepath.Join(d.dir, "*_energy_uj"))
		if len(left) == 0 {
			d.meta.Epoch = newEpoch()
			return d, nil
		}
		err = errors.New("counter files without metadata")
	}
	if err == nil {
		for _, z := range meta.Zones {
			b, rerr := os.ReadFile(filepath.Join(d.dir, hostshare.ZoneFile(z.Name)))
			if rerr != nil {
				err = rerr
				break
			}
			uj, perr := hostshare.ParseCounter(b)
			if perr != nil {
				err = perr
				break
			}
			d.zones[z.Name] = &counter{totalJ: float64(uj) / 1e6}
		}
		if err == nil {
			d.meta = *meta
			w.cfg.Log.Info("guest share continues", zap.String("dir", d.dir), zap.String("epoch", meta.Epoch), zap.Uint64("seq", meta.Seq))
			return d, nil
		}
	}
	// Unreadable: start again from zero, visibly.
	var resets uint64 = 1
	if meta != nil {
		resets = meta.Resets + 1
	}
	d.zones = map[string]*counter{}
	d.meta.Epoch, d.meta.Resets, d.meta.ResetAt = newEpoch(), resets, time.Now().UTC()
	w.cfg.Log.Warn("guest share unreadable: its counters restart from zero under a new epoch",
		zap.String("dir", d.dir), zap.Uint64("resets", resets), zap.Error(err))
	return d, nil
}

func newEpoch() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
