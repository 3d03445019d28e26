package config

import (
	"strings"
	"testing"
	"time"
)

func TestVMSettings(t *testing.T) {
	c, err := Load([]string{"--guests.share.path=/var/lib/wattrace/guests", "--guests.share.interval=2s",
		"--power.host-share.path=/mnt/host", "--power.host-share.staleness=7s", "--vm.idle-split=memory"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Guests != (Guests{SharePath: "/var/lib/wattrace/guests", ShareInterval: 2 * time.Second, IdleSplit: "memory"}) ||
		c.Power.HostShare != "/mnt/host" || c.Power.HostShareStaleness != 7*time.Second {
		t.Errorf("guests %+v host share %q %v", c.Guests, c.Power.HostShare, c.Power.HostShareStaleness)
	}
	for args, key := range map[string]string{
		"--guests.share.path=relative":                        KeyGuestsSharePath,
		"--guests.share.interval=0s":                          KeyGuestsShareInterval,
		"--vm.idle-split=cores":                               KeyVMIdleSplit,
		"--power.host-share.path=mnt":                         KeyPowerHostSharePath,
		"--power.host-share.staleness=-1s":                    KeyPowerHostShareStale,
		"--guests.share.path=/var/lib/g --collector.vm=false": KeyGuestsSharePath,
	} {
		_, err := Load(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: error %v, want one naming %s", args, err, key)
		}
	}
}
