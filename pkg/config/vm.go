package config

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// The VM keys (docs/vm.md): on a libvirt host, guests.share.* publishes
// each domain's energy to its guest; in a guest, power.host-share.* finds
// that share and falls back to the estimator when it goes stale.
const (
	KeyGuestsSharePath      = "guests.share.path"
	KeyGuestsShareInterval  = "guests.share.interval"
	KeyGuestsShareGroup     = "guests.share.group"
	KeyVMIdleSplit          = "vm.idle-split"
	KeyPowerHostSharePath   = discover.KeyHostSharePath
	KeyPowerHostShareStale  = discover.KeyHostShareStale
	defaultGuestsShareEvery = 5 * time.Second
)

// VMIdleSplits are vm.idle-split's values: how a host's idle energy is
// split among its VMs under power.idle-policy=even.
var VMIdleSplits = []string{"even", "vcpus", "memory"}

// Guests configures the host side: where each domain's share is written
// (empty: nowhere) and how often.
type Guests struct {
	SharePath     string
	ShareInterval time.Duration
	// ShareGroup: the shares 0640 (directories 0750) in this group, a
	// name or a numeric gid; empty: readable by everyone.
	ShareGroup string
	// IdleSplit is vm.idle-split: even, vcpus or memory.
	IdleSplit string
}

func vmFlags(fs *pflag.FlagSet) {
	fs.String(KeyGuestsSharePath, "", "On a libvirt host: write each VM's energy (dynamic plus the idle share power.idle-policy gives it) under this directory, one subdirectory per domain (uuid-<uuid>), to be shared read-only with that guest (docs/vm.md), e.g. /var/lib/wattrace/guests. Empty: off.")
	fs.Duration(KeyGuestsShareInterval, defaultGuestsShareEvery, "How often the guests' shares are written; each write asks the stats loop for figures no older than this.")
	fs.String(KeyVMIdleSplit, "even", "On a host with VMs and power.idle-policy=even: the idle energy is split among the VMs that exist (busy or not, host daemons none): even (one share per VM), vcpus (by the vCPUs libvirt's domain XML allocates) or memory (by its memory); a VM whose allocation is not known makes the interval's split even, with a warning.")
	fs.String(KeyGuestsShareGroup, "", "QEMU's group (a name or a numeric gid, e.g. kvm or libvirt-qemu): the shares' files are written 0640 and the domains' directories 0750 in that group, so only QEMU reads them. Empty: 0644 and 0755, readable by everyone.")
}

func decodeVM(d *decoder) Guests {
	return Guests{SharePath: d.String(KeyGuestsSharePath), ShareInterval: d.Duration(KeyGuestsShareInterval),
		ShareGroup: d.String(KeyGuestsShareGroup), IdleSplit: d.String(KeyVMIdleSplit)}
}

func (c *Config) validateVM() []error {
	var errs []error
	if p := c.Guests.SharePath; p != "" && !filepath.IsAbs(p) {
		errs = append(errs, fmt.Errorf("invalid value %q for %s: want an absolute path", p, KeyGuestsSharePath))
	}
	if c.Guests.SharePath != "" && !c.Collector.LevelOn[ident.KindVM] {
		// The shares are the VMs' workload figures, which exist only
		// while the vm level is on.
		errs = append(errs, fmt.Errorf("invalid value %q for %s: %s is off, so no VM's energy is attributed", c.Guests.SharePath, KeyGuestsSharePath, KeyCollector(string(ident.KindVM))))
	}
	if !slices.Contains(VMIdleSplits, c.Guests.IdleSplit) {
		errs = append(errs, fmt.Errorf("invalid value %q for %s: allowed %s", c.Guests.IdleSplit, KeyVMIdleSplit, strings.Join(VMIdleSplits, ", ")))
	}
	if c.Guests.ShareInterval <= 0 {
		errs = append(errs, fmt.Errorf("invalid value %q for %s: must be > 0", c.Guests.ShareInterval, KeyGuestsShareInterval))
	}
	return errs
}
