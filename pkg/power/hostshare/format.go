// Package hostshare is the share a wattrace on a libvirt host publishes to
// each of its guests, and the guest's meter that reads it: the energy the
// host attributed to the VM, passed through so that the guest's exporter
// splits a measured figure among its own processes instead of estimating.
//
// # The share
//
// One directory per domain (on the host <guests.share.path>/uuid-<domain uuid>/,
// mounted read-only in the guest at power.host-share.path, by default
// /run/wattrace/host) holds:
//
//   - <zone>_energy_uj, one per zone: the VM's cumulative energy in that
//     zone in microjoules, one unsigned decimal and a newline, as sysfs
//     writes energy_uj. It never decreases while Meta.Epoch stays the same.
//   - meta: JSON (Meta): format version, domain, zones with their method,
//     source and the host's idle policy, host name, boot id, epoch and
//     reset count, and the time and sequence number of the last update.
//
// Every file is replaced atomically (written beside it, then renamed), the
// zone files first and meta last, so a reader never sees half a number.
//
// The file format is defined here, once: the writer (internal/guestshare) and
// the reader (Meter) both use it. A host that cannot share a directory
// with its guests serves the same content over vsock, one frame per
// connection (stream.go), which Meter reads when Options.Dial is set.
package hostshare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/wattrace/wattrace/internal/decimal"
)

// Version is the share's format version; a reader refuses others.
const Version = 1

// MetaFile is the metadata file's name in a domain's directory.
const MetaFile = "meta"

// DefaultMount is where a guest finds its share unless configured
// otherwise (power.host-share.path).
const DefaultMount = "/run/wattrace/host"

// Meta is the metadata file.
type Meta struct {
	Version int    `json:"version"`
	Domain  Domain `json:"domain"`
	// Host is the host's name; the guest's source label is "host:<Host>".
	Host string `json:"host"`
	// BootID is the host's boot id (/proc/sys/kernel/random/boot_id) when
	// the counters were last written.
	BootID string `json:"boot_id,omitempty"`
	// Epoch names one unbroken run of the counters: it changes only when
	// they restart from zero (Resets grows, ResetAt says when). A reader
	// that sees a new epoch takes a fresh baseline instead of calling the
	// drop a glitch. Host exporter restarts and domain restarts keep it.
	Epoch   string    `json:"epoch"`
	Resets  uint64    `json:"resets"`
	ResetAt time.Time `json:"reset_at,omitzero"`
	// Zones lists the zone files.
	Zones []Zone `json:"zones"`
	// Updated is the end of the host interval the counters describe; Seq
	// counts the updates of this epoch.
	Updated time.Time `json:"updated"`
	Seq     uint64    `json:"seq"`
	// IntervalSeconds is how often the host writes.
	IntervalSeconds float64 `json:"interval_seconds"`
}

// Domain names the libvirt domain the share is for.
type Domain struct {
	Name string `json:"name,omitempty"`
	UUID string `json:"uuid,omitempty"`
}

// Zone describes one zone file.
type Zone struct {
	Name string `json:"name"`
	// Method is "measured" or "estimated": how the host got the zone's
	// node energy the VM's share comes from.
	Method string `json:"method"`
	// Source is the host's meter of the zone (rapl, redfish, estimator).
	Source string `json:"source"`
	// IdlePolicy is the host's power.idle-policy: under none the counter
	// holds the VM's dynamic energy only; under even or cpu it also holds
	// the VM's share of the host's idle energy.
	IdlePolicy string `json:"idle_policy"`
}

// zoneName limits zone names to what is safe in a file name.
var zoneName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// ZoneFile is the counter file of zone.
func ZoneFile(zone string) string { return zone + "_energy_uj" }

// Validate checks what a reader relies on.
func (m *Meta) Validate() error {
	switch {
	case m.Version != Version:
		return fmt.Errorf("format version %d, want %d", m.Version, Version)
	case m.Epoch == "":
		return errors.New("no epoch")
	case len(m.Zones) == 0:
		return errors.New("no zones")
	case m.Updated.IsZero():
		return errors.New("no update time")
	}
	seen := map[string]bool{}
	for _, z := range m.Zones {
		if !zoneName.MatchString(z.Name) || seen[z.Name] {
			return fmt.Errorf("invalid or repeated zone name %q", z.Name)
		}
		seen[z.Name] = true
	}
	return nil
}

// ReadMeta reads and validates dir's metadata file.
func ReadMeta(dir string) (*Meta, error) {
	b, err := os.ReadFile(filepath.Join(dir, MetaFile))
	if err != nil {
		return nil, err
	}
	return ParseMeta(b)
}

// ParseMeta parses and validates a metadata file's content.
func ParseMeta(b []byte) (*Meta, error) {
	var m Meta
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("parse %s: %w", MetaFile, err)
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", MetaFile, err)
	}
	return &m, nil
}

// ParseCounter parses a zone file: microjoules as one unsigned decimal,
// with an optional trailing newline.
func ParseCounter(b []byte) (uint64, error) {
	t := bytes.TrimSuffix(b, []byte("\n"))
	v, ok := decimal.Parse(t)
	if !ok {
		s := string(t)
		if len(s) > 32 {
			s = s[:32] + "…"
		}
		return 0, fmt.Errorf("invalid counter %q: not an unsigned decimal", s)
	}
	return v, nil
}

// FormatCounter is the content of a zone file holding joules.
func FormatCounter(joules float64) []byte {
	uj := math.Round(joules * 1e6)
	if !(uj >= 0) || uj > math.MaxUint64/2 {
		uj = 0
	}
	return strconv.AppendUint(nil, uint64(uj), 10)
}

// Perm is who may read a share's files: their mode, and their group
// (Gid; below zero, the writer's own).
type Perm struct {
	Mode os.FileMode
	Gid  int
}

// WorldReadable is the default Perm: 0644, so QEMU reads the files as
// whatever user it runs as.
var WorldReadable = Perm{Mode: 0o644, Gid: -1}

// Write writes a share: each zone's counter (joules[zone]), then the
// metadata, so a reader that sees an update's metadata sees its counters.
// The files are WorldReadable.
func Write(dir string, m *Meta, joules map[string]float64) error {
	return WritePerm(dir, m, joules, WorldReadable)
}

// WritePerm is Write with the files' permissions.
func WritePerm(dir string, m *Meta, joules map[string]float64, p Perm) error {
	if err := m.Validate(); err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	for _, z := range m.Zones {
		if err := WriteAtomicPerm(dir, ZoneFile(z.Name), FormatCounter(joules[z.Name]), p); err != nil {
			return err
		}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	return WriteAtomicPerm(dir, MetaFile, b, p)
}

// syncFile flushes a file or directory to stable storage. It is a
// variable so that a test can see when, relative to the rename, each sync
// happens: a crash leaves no trace that would tell the order otherwise.
var syncFile = (*os.File).Sync

// WriteAtomic replaces dir/name with data: a temporary file beside it,
// renamed over it, so a reader sees the old content or the new, never a
// part. The file is readable by everyone: QEMU reads it for the guest
// as its own user.
//
// It is durable too: the temporary file is synced before the rename, so
// a crash after the rename cannot leave a new name over empty or partial
// content, and the directory after it, so the rename itself survives a
// crash. Without both, a host that loses power could come back with a
// counter lower than one a guest already read, or with an empty one.
func WriteAtomic(dir, name string, data []byte) error {
	return WriteAtomicPerm(dir, name, data, WorldReadable)
}

// WriteAtomicPerm is WriteAtomic with the file's permissions, set before
// the rename so that the file never shows under its name with others.
func WriteAtomicPerm(dir, name string, data []byte, p Perm) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(append(data, '\n'))
	if err == nil && p.Gid >= 0 {
		err = f.Chown(-1, p.Gid)
	}
	if err == nil {
		err = f.Chmod(p.Mode)
	}
	if err == nil {
		err = syncFile(f)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("write %s: sync directory: %w", filepath.Join(dir, name), err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = syncFile(d)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
