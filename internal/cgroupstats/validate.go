package cgroupstats

import (
	"errors"
	"fmt"
	"io/fs"
	"runtime"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Source is the name the reader's health and rejections carry.
const Source = "cgroupfs"

// Limits of plausible gauges: no cgroup holds more memory than a PiB or
// more tasks than the kernel's largest pid_max.
const (
	maxMemoryBytes = 1 << 50
	maxTasks       = 1 << 22
	// psiRate is how fast a PSI total may grow: stall time is wall time,
	// at most one second per second; the slack covers the kernel's
	// per-CPU aggregation being read mid-update.
	psiRate = 1.5
	// ioBytesRate and ioOpsRate bound one device's IO: far beyond any
	// device, yet they refuse garbage such as UINT64_MAX.
	ioBytesRate = 1e12
	ioOpsRate   = 1e9
)

// Options configures NewReaderWith.
type Options struct {
	// SysfsRoot is where sysfs is mounted, for device names ("/sys" when
	// empty).
	SysfsRoot string
	// CPUs bounds how fast CPU time can grow (runtime.NumCPU() when 0).
	CPUs int
	// Log receives rejected readings (rate-limited); nil discards them.
	Log *zap.Logger
	// now is the clock; tests set it.
	now func() time.Time
}

// checker validates each reading before its values reach an exported
// counter: counters (CPU, memory events, PSI, IO) must not go back, and CPU
// may grow at most CPUs × Δt, PSI at most Δt; gauges (memory, tasks) must
// be within range. A rejected counter keeps its last good value (so the
// exported counter neither decreases nor takes the glitch); a rejected
// gauge is marked unavailable. Two consecutive readings that agree after a
// step back are a cgroup re-created under the same path, and are taken
// (reading.Counter).
type checker struct {
	cpus float64
	now  func() time.Time
	// tall counts each cgroup read as a read, one with a file that could
	// not be read or parsed as an error, and the rejected readings.
	tall *sourcehealth.Tally

	mu   sync.Mutex
	byID map[string]*cgroupCounters
}

// cgroupCounters is one cgroup's counters' validation state.
type cgroupCounters struct {
	user, sys, failcnt, oom counter
	psi                     [reading.NumPSIResources][2]counter
	io                      map[uint64]*[6]counter // by major<<32|minor
}

// counter is a reading.Counter with its last accepted value.
type counter struct {
	c    reading.Counter
	last float64
}

func newChecker(o Options) *checker {
	cpus := o.CPUs
	if cpus <= 0 {
		cpus = runtime.NumCPU()
	}
	now := o.now
	if now == nil {
		now = time.Now
	}
	return &checker{cpus: float64(cpus), now: now, tall: sourcehealth.New(Source, sourcehealth.Options{Log: o.Log}), byID: map[string]*cgroupCounters{}}
}

// check validates s, read for rel with err, in place.
func (k *checker) check(rel string, s *reading.Resources, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if errors.Is(err, fs.ErrNotExist) {
		k.tall.Count(nil)
		delete(k.byID, rel) // gone: a cgroup created there later starts afresh
		return
	}
	k.tall.Count(err) // err: a file that could not be read or parsed
	cc := k.byID[rel]
	if cc == nil {
		cc = &cgroupCounters{}
		cc.user.c.MaxRate, cc.sys.c.MaxRate = k.cpus, k.cpus
		for i := range cc.psi {
			cc.psi[i][0].c.MaxRate, cc.psi[i][1].c.MaxRate = psiRate, psiRate
		}
		k.byID[rel] = cc
	}
	t := k.now()
	a := s.Available
	if a.Has(reading.FieldCPU) {
		s.CPUUserSeconds = k.counter(&cc.user, s.CPUUserSeconds, t, rel, "cpu user seconds", "")
		s.CPUSystemSeconds = k.counter(&cc.sys, s.CPUSystemSeconds, t, rel, "cpu system seconds", "")
	}
	if a.Has(reading.FieldMemoryFailCount) {
		s.MemoryFailCount = uint64(k.counter(&cc.failcnt, float64(s.MemoryFailCount), t, rel, "memory fail count", ""))
	}
	if a.Has(reading.FieldMemoryOOMKills) {
		s.MemoryOOMKills = uint64(k.counter(&cc.oom, float64(s.MemoryOOMKills), t, rel, "memory oom kills", ""))
	}
	for i := range s.PSI {
		r := reading.PSIResource(i)
		if a.Has(r.SomeField()) {
			s.PSI[i].SomeSeconds = k.counter(&cc.psi[i][0], s.PSI[i].SomeSeconds, t, rel, r.String(), " pressure some")
		}
		if a.Has(r.FullField()) {
			s.PSI[i].FullSeconds = k.counter(&cc.psi[i][1], s.PSI[i].FullSeconds, t, rel, r.String(), " pressure full")
		}
	}
	if a.Has(reading.FieldIO) {
		if cc.io == nil {
			cc.io = map[uint64]*[6]counter{}
		}
		for j := range s.IO {
			d := &s.IO[j]
			key := uint64(d.Major)<<32 | uint64(d.Minor)
			cs := cc.io[key]
			if cs == nil {
				cs = &[6]counter{}
				for f := range cs {
					cs[f].c.MaxRate = ioBytesRate
					if f%2 == 1 { // bytes, ops, bytes, ops, ... as read below
						cs[f].c.MaxRate = ioOpsRate
					}
				}
				cc.io[key] = cs
			}
			for f, v := range []*uint64{&d.ReadBytes, &d.ReadOps, &d.WriteBytes, &d.WriteOps, &d.DiscardBytes, &d.DiscardOps} {
				*v = uint64(k.counter(&cs[f], float64(*v), t, rel, "io ", d.Device))
			}
		}
	}
	for _, g := range []struct {
		field reading.ResourceField
		v     uint64
		max   float64
		what  string
	}{
		{reading.FieldMemoryCurrent, s.MemoryCurrent, maxMemoryBytes, "memory current"},
		{reading.FieldMemoryRSS, s.MemoryRSS, maxMemoryBytes, "memory rss"},
		{reading.FieldMemoryCache, s.MemoryCache, maxMemoryBytes, "memory cache"},
		{reading.FieldMemorySwap, s.MemorySwap, maxMemoryBytes, "memory swap"},
		{reading.FieldTasks, s.Tasks, maxTasks, "tasks"},
	} {
		if !a.Has(g.field) {
			continue
		}
		if err := reading.CheckGauge(float64(g.v), g.max); err != nil {
			k.tall.Reject(err, rel+": "+g.what)
			s.Available &^= g.field
		}
	}
}

// counter validates one counter reading and returns the value to export:
// v when accepted, the last accepted value when not.
// what and more name it in the log; they are joined only then, so that a
// good reading allocates nothing.
func (k *checker) counter(c *counter, v float64, t time.Time, rel, what, more string) float64 {
	if _, err := c.c.Observe(v, t); err != nil {
		k.tall.Reject(err, fmt.Sprintf("%s: %s%s", rel, what, more))
		return c.last
	}
	c.last = v
	return v
}

// Health reports the reader's reads of cgroups, those with a file that
// could not be read or parsed, and the rejected readings. It is safe to
// call while another goroutine reads.
func (r *Reader) Health() []reading.SourceHealth {
	h := r.check.tall.Health()
	// A cgroup that fails to read fails alone; the reader as a whole is
	// always up.
	h.Up = true
	return []reading.SourceHealth{h}
}
