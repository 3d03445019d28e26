package discover

import (
	"context"
	"fmt"
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
		zs, err := m.Read()
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
