package guestshare

import (
	"path/filepath"
	"strconv"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
)

// The guests.share.* keys.
const (
	KeySharePath     = "guests.share.path"
	KeyShareInterval = "guests.share.interval"
	KeyShareGroup    = "guests.share.group"
	KeyShareVsock    = "guests.share.vsock-port"
)

// Declare declares the guests.share.* settings bound to c's Dir,
// Interval, Group and VsockPort; the rest of c is the exporter's to set.
func (c *Config) Declare(s *setting.Set) {
	s.String(&c.Dir, KeySharePath, "", "On a libvirt host: write each VM's energy (dynamic plus the idle share power.idle-policy gives it) under this directory, one subdirectory per domain (uuid-<uuid>), to be shared read-only with that guest (docs/vm.md), e.g. /var/lib/wattrace/guests. Empty: off.").Checked(func() error {
		if c.Dir != "" && !filepath.IsAbs(c.Dir) {
			return setting.Invalid(KeySharePath, c.Dir, "want an absolute path")
		}
		return nil
	})
	s.Duration(&c.Interval, KeyShareInterval, 5*time.Second, "How often the guests' shares are written; each write asks the stats loop for figures no older than this.")
	s.String(&c.Group, KeyShareGroup, "", "QEMU's group (a name or a numeric gid, e.g. kvm or libvirt-qemu): the shares' files are written 0640 and the domains' directories 0750 in that group, so only QEMU reads them. Empty: 0644 and 0755, readable by everyone.")
	s.Int(&c.VsockPort, KeyShareVsock, 0, "On a libvirt host whose guests cannot mount a directory: also serve each domain's share over vsock on this port, to that guest alone: on a Unix socket per domain, <guests.share.path>/uuid-<uuid>/vsock_<port> (hybrid vsock: the domain's vsock backend's uds-path is <guests.share.path>/uuid-<uuid>/vsock), and on AF_VSOCK by the guest's context id (libvirt's <vsock><cid address>) where the host has /dev/vhost-vsock. The guest reads it with power.host-share.vsock-port. 0: off.",
		0, "want a port, 0 (off) to "+strconv.FormatUint(uint64(hostshare.MaxVsockPort), 10)).Checked(func() error {
		if err := checkVsockPort(c.VsockPort); err != nil {
			return err
		}
		if c.VsockPort > 0 && c.Dir == "" {
			// The shares served are the ones written: their counters
			// continue across restarts from what the directory holds.
			return setting.Invalid(KeyShareVsock, c.VsockPort, "needs "+KeySharePath+" (the shares it serves are written there)")
		}
		return nil
	})
}

// checkVsockPort checks guests.share.vsock-port: 0 (off) or a port.
func checkVsockPort(p int) error {
	if p < 0 || uint64(p) > uint64(hostshare.MaxVsockPort) {
		return setting.Invalid(KeyShareVsock, p, "want a port, 0 (off) to "+strconv.FormatUint(uint64(hostshare.MaxVsockPort), 10))
	}
	return nil
}
