package stats

import (
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// maxHistory bounds the CPU time a consumer can have used before the
// exporter's first read: every CPU busy for this long, beyond any uptime.
// It refuses garbage such as UINT64_MAX (584 CPU-years) on nodes of up to
// 58 CPUs; past the first read every increase is held to CPUs × Δt.
const maxHistory = 10 * 365 * 24 * time.Hour

// cpuCheck validates the accounting source's cumulative CPU counters (per
// cgroup and per process) before the ledger credits them, for sources that
// do not validate their own (the BPF maps; procfs checks its files itself,
// with the same reading.CPUTime, and reports its own health). It times the
// check by the loop's reads. The BPF source's own reset is expected (it
// forgets a cgroup idle for a few reads and counts it afresh from zero when
// it runs again), so the check is made with Restarts.
type cpuCheck struct {
	reading.CPUTime

	// The check's own clock, which the counters are timed by: at is the
	// current read's time, prev the previous one's. stamp and wall are the
	// previous read's loop timestamp and wall-clock time.
	at, prev    time.Time
	stamp, wall time.Time

	// tall is the source's health, with the rejections; the loop reads
	// the source synchronously, so its Age stays 0.
	tall *sourcehealth.Tally
}

func newCPUCheck(source string, cpus int, log *zap.Logger) *cpuCheck {
	tall := sourcehealth.New(source, sourcehealth.Options{Log: log})
	return &cpuCheck{CPUTime: reading.CPUTime{MaxRate: float64(cpus) * 1e9, Restarts: true, Rejects: tall.Rejects()}, tall: tall}
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
	var zero time.Time
	if !baseline {
		zero = k.prev
	}
	c := k.Counter(zero)
	return &c
}

// delta validates v, read at the check's current time, and returns its
// accepted increase (0 for the baseline and for a rejected reading).
func (k *cpuCheck) delta(c *reading.Counter, v uint64, what func() string) uint64 {
	d, _ := k.Observe(c, v, k.at, k.prev, what)
	return d
}

// read counts one read of the source; err is its failure.
func (k *cpuCheck) read(err error) { k.tall.Read(err) }

// Health reports the reads and rejections, as the source's health.
func (k *cpuCheck) Health() []reading.SourceHealth {
	return []reading.SourceHealth{k.tall.Health()}
}
