package guestshare

import (
	"path/filepath"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
)

// The guests.share.* keys.
const (
	KeySharePath     = "guests.share.path"
	KeyShareInterval = "guests.share.interval"
	KeyShareGroup    = "guests.share.group"
)

// Declare declares the guests.share.* settings bound to c's Dir,
// Interval and Group; the rest of c is the exporter's to set.
func (c *Config) Declare(s *setting.Set) {
	s.String(&c.Dir, KeySharePath, "", "On a libvirt host: write each VM's energy (dynamic plus the idle share power.idle-policy gives it) under this directory, one subdirectory per domain (uuid-<uuid>), to be shared read-only with that guest (docs/vm.md), e.g. /var/lib/wattrace/guests. Empty: off.").Checked(func() error {
		if c.Dir != "" && !filepath.IsAbs(c.Dir) {
			return setting.Invalid(KeySharePath, c.Dir, "want an absolute path")
		}
		return nil
	})
	s.Duration(&c.Interval, KeyShareInterval, 5*time.Second, "How often the guests' shares are written; each write asks the stats loop for figures no older than this.")
	s.String(&c.Group, KeyShareGroup, "", "QEMU's group (a name or a numeric gid, e.g. kvm or libvirt-qemu): the shares' files are written 0640 and the domains' directories 0750 in that group, so only QEMU reads them. Empty: 0644 and 0755, readable by everyone.")
}
