package reading

import (
	"errors"
	"time"
)

// CPUTime is the one check of cgroups' and processes' cumulative CPU time
// (ns), whichever source reads it: procfs checks its files with it, and the
// stats loop the BPF maps, which do not check their own. A counter may grow
// at most MaxRate × Δt (with CPUTimeSlack); one that goes back, or jumps
// further, is rejected, counted and logged under the source's name, and
// never credited. A glitch loses nothing: the next good reading continues
// from the last good one (Counter).
type CPUTime struct {
	// MaxRate is the fastest a counter can grow, in ns per second: every
	// CPU busy, with whatever margin the source allows.
	MaxRate float64
	// Restarts is set for a source that may count a key afresh from zero:
	// the BPF accounting forgets a cgroup idle for a few reads and, when
	// it runs again, counts it from zero. Without it (procfs: the kernel
	// gives a re-created cgroup a new id and a new process a new start
	// time) a reading below the last is always a glitch.
	Restarts bool
	// Rejects counts and logs the rejected readings.
	Rejects *Rejects
}

// Counter returns the counter of a key seen for the first time. zero is
// when its count was last known to be 0, which bounds its first reading to
// every CPU busy since: the previous read for a key that read lacked, the
// boot for a key of any age. The zero time sets no bound; the first
// reading is then only the baseline.
func (k CPUTime) Counter(zero time.Time) Counter {
	c := Counter{MaxRate: k.MaxRate, Slack: CPUTimeSlack, NeverResets: !k.Restarts}
	if !zero.IsZero() {
		_, _ = c.Observe(0, zero)
	}
	return c
}

// Observe validates v, read at t, against c (made by Counter) and returns
// its accepted increase. A rejected reading returns false, after it is
// counted and logged under what (called only then). With Restarts, a
// reading below the last one that is itself no more than every CPU busy
// since prev, the previous read, is the key's new count and is credited.
func (k CPUTime) Observe(c *Counter, v uint64, t, prev time.Time, what func() string) (uint64, bool) {
	d, err := c.Observe(float64(v), t)
	var rej *Rejection
	if k.Restarts && errors.As(err, &rej) && rej.Reason == Backwards {
		fresh := k.Counter(prev)
		if d, err := fresh.Observe(float64(v), t); err == nil {
			*c = fresh
			return uint64(d), true
		}
	}
	if err != nil {
		k.Rejects.Add(err, what())
		return 0, false
	}
	return uint64(d), true
}
