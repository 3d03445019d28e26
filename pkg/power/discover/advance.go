package discover

import (
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
)

// advanceWindow bounds how long an energy counter has to move before its
// meter is believed. A real RAPL counter updates about every millisecond,
// so one that still reads 0 J after this long has no energy behind it.
const advanceWindow = 250 * time.Millisecond

// mustAdvance reads m (after its first, zero Read) until some zone's
// energy rises, and fails when none did within window. A hypervisor can
// expose the power PMU with events that always count 0 J (perf stat shows
// "0.00 Joules power/energy-psys/"); such a meter reads without error and
// never goes backwards, so only this check keeps it from owning the CPU
// zones with a node that uses no energy, where the estimator would say
// what it knows.
func mustAdvance(ctx context.Context, m power.Meter, window, poll time.Duration) error {
	deadline := time.NewTimer(window)
	defer deadline.Stop()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("its counters did not advance in %s: events that count no energy (a hypervisor's power PMU)", window)
		case <-tick.C:
		}
		zs, err := m.Read(ctx)
		if err != nil {
			continue
		}
		for _, z := range zs {
			if z.Joules > 0 {
				return nil
			}
		}
	}
}

// A power PMU whose events count nothing does so for the whole boot: it
// is the hypervisor's, not a state the hardware passes through. Where
// Config.VerdictDir is set (`wattrace measure`, a process per command),
// a failed advance check is written there, keyed by the boot, the sysfs
// root and the PMU's type, so that later processes of the same boot skip
// the 250 ms the check costs; a PMU that counts passes the check in
// milliseconds and is never written down.

// verdictPath is where the failed check of the power PMU under sysfsRoot
// is kept this boot; "" when the boot or the PMU cannot be named.
func verdictPath(dir, procfsRoot, sysfsRoot string) string {
	if dir == "" {
		return ""
	}
	boot, err := os.ReadFile(filepath.Join(procfsRoot, "sys", "kernel", "random", "boot_id"))
	if err != nil {
		return ""
	}
	typ, err := os.ReadFile(filepath.Join(sysfsRoot, "bus", "event_source", "devices", "power", "type"))
	if err != nil {
		return ""
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(sysfsRoot + "\x00" + strings.TrimSpace(string(typ))))
	return filepath.Join(dir, fmt.Sprintf("perf-rapl-stalled-%s-%016x", strings.TrimSpace(string(boot)), h.Sum64()))
}

// stalledThisBoot returns the reason a earlier process of this boot found
// the PMU's counters stalled; "" when none did.
func stalledThisBoot(path string) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// rememberStalled writes a failed check down for the rest of the boot;
// failing to write costs later processes the check, nothing else.
func rememberStalled(path string, why error) {
	if path == "" {
		return
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return
	}
	tmp := path + ".tmp" + strconv.Itoa(os.Getpid())
	if os.WriteFile(tmp, []byte(why.Error()+"\n"), 0o644) == nil {
		_ = os.Rename(tmp, path)
	}
}
