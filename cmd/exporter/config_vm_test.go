package main

import (
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/power/discover"
)

func TestVMSettings(t *testing.T) {
	c, err := Load([]string{"--guests.share.path=/var/lib/wattrace/guests", "--guests.share.interval=2s",
		"--power.host-share.path=/mnt/host", "--power.host-share.staleness=7s", "--vm.idle-split=memory",
		"--guests.share.vsock-port=5924", "--power.host-share.vsock-port=5925"})
	if err != nil {
		t.Fatal(err)
	}
	if g := c.Guests; g.Dir != "/var/lib/wattrace/guests" || g.Interval != 2*time.Second || g.Group != "" || c.Stats.VMIdleSplit != "memory" ||
		c.Power.HostShare != "/mnt/host" || c.Power.HostShareStaleness != 7*time.Second || g.VsockPort != 5924 || c.Power.HostShareVsock != 5925 {
		t.Errorf("guests %+v, vm.idle-split %q, host share %q %v vsock %d", g, c.Stats.VMIdleSplit, c.Power.HostShare, c.Power.HostShareStaleness, c.Power.HostShareVsock)
	}
	for args, key := range map[string]string{
		"--guests.share.path=relative":                                        guestshare.KeySharePath,
		"--guests.share.interval=0s":                                          guestshare.KeyShareInterval,
		"--vm.idle-split=cores":                                               stats.KeyVMIdleSplit,
		"--power.host-share.path=mnt":                                         discover.KeyHostSharePath,
		"--power.host-share.staleness=-1s":                                    discover.KeyHostShareStale,
		"--guests.share.path=/var/lib/g --collector.vm=false":                 guestshare.KeySharePath,
		"--guests.share.path=/var/lib/g --guests.share.vsock-port=-1":         guestshare.KeyShareVsock,
		"--guests.share.path=/var/lib/g --guests.share.vsock-port=4294967295": guestshare.KeyShareVsock,
		"--guests.share.vsock-port=5924":                                      guestshare.KeyShareVsock,
		"--power.host-share.vsock-port=-2":                                    discover.KeyHostShareVsock,
		"--power.host-share.vsock-port=4294967295":                            discover.KeyHostShareVsock,
	} {
		_, err := Load(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", args, err, key)
		}
	}
}
