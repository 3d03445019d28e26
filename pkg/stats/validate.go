package stats

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/snapshot"
)

// maxHistory bounds the CPU time a consumer can have used before the
// exporter's first read: every CPU busy for this long, beyond any uptime.
// It refuses garbage such as UINT64_MAX (584 CPU-years) on nodes of up to
// 58 CPUs; past the first read every increase is held to CPUs × Δt.
const maxHistory = 10 * 365 * 24 * time.Hour

// cpuCheck validates the accounting source's cumulative CPU counters (per
// cgroup and per process) before the ledger credits them, for sources that
// do not validate their own (the BPF maps; procfs checks its files itself
// and reports its own health). A counter may grow at most CPUs × Δt; one
// that goes back, or jumps further, is rejected, counted under the
// source's name and never credited. A glitch loses nothing: the next good
// reading continues from the last good one. Two rejected readings that are
// consistent with each other are taken as a reset and only the interval
// spanning it is lost (reading.Counter). The BPF source's own reset is
// expected: it forgets a cgroup idle for a few reads and, when the cgroup
// runs again, counts it afresh from zero, so a value below the last one
// that is itself no more than CPUs × Δt is that new count, and is credited.
type cpuCheck struct {
	maxRate float64 // ns per second: every CPU busy
	rejects *reading.Rejects

	// The check's own clock, which the counters are timed by: at is the
	// current read's time, prev the previous one's. stamp and wall are the
	// previous read's loop timestamp and wall-clock time.
	at, prev    time.Time
	stamp, wall time.Time

	mu          sync.Mutex
	reads, errs uint64
	up          bool
}

func newCPUCheck(source string, cpus int, log *zap.Logger) *cpuCheck {
	return &cpuCheck{maxRate: float64(cpus) * 1e9, rejects: reading.NewRejects(source, log)}
}

// advance moves the check's clock to a read the loop stamped now and that
// was taken at readAt (wall clock), by the longer of the two spans since the
// previous read: a read the loop took late (its tick waited under load)
// covers more time than its stamp says, while tests that step synthetic
// time keep their stamps' intervals.
func (k *cpuCheck) advance(now, readAt time.Time, baseline bool) {
	if baseline {
		k.at, k.prev = now, now
	} else {
		span := now.Sub(k.stamp)
		if r := readAt.Sub(k.wall); r > span {
			span = r
		}
		k.prev, k.at = k.at, k.at.Add(span)
	}
	k.stamp, k.wall = now, readAt
}

// counter returns a counter for a new key. A key first seen after the
// baseline read did not exist at the previous read, so its counter starts
// from 0 then and its first value is held to the same ceiling.
func (k *cpuCheck) counter(baseline bool) *reading.Counter {
	c := &reading.Counter{MaxRate: k.maxRate, Slack: reading.CPUTimeSlack}
	if !baseline {
		_, _ = c.Observe(0, k.prev)
	}
	return c
}

// delta validates v, read at the check's current time, and returns its
// accepted increase (0 for the baseline and for a rejected reading).
func (k *cpuCheck) delta(c *reading.Counter, v uint64, what func() string) uint64 {
	d, err := c.Observe(float64(v), k.at)
	var rej *reading.Rejection
	if errors.As(err, &rej) && rej.Reason == reading.Backwards {
		fresh := k.counter(false)
		if d, err := fresh.Observe(float64(v), k.at); err == nil {
			*c = *fresh
			return uint64(d)
		}
	}
	if err != nil {
		k.rejects.Add(err, what())
		return 0
	}
	return uint64(d)
}

// read counts one read of the source; err is its failure.
func (k *cpuCheck) read(err error) {
	k.mu.Lock()
	k.reads++
	k.up = err == nil
	if err != nil {
		k.errs++
	}
	k.mu.Unlock()
}

// Health reports the rejections, as the source's health.
func (k *cpuCheck) Health() []snapshot.SourceHealth {
	k.mu.Lock()
	defer k.mu.Unlock()
	return []snapshot.SourceHealth{{Source: k.rejects.Source(), Up: k.up, Reads: k.reads, Errors: k.errs, Rejected: k.rejects.Counts()}}
}
