// Package sourcehealth keeps the health of the sources of readings (the
// meters, the CPU accounting, the cgroup reader, the GPUs, the carbon
// providers): one Tally each. Every source counts its reads, failures and
// rejected readings the same way, so one source's bookkeeping cannot drift
// from another's. A source hands its health on as []reading.SourceHealth
// from a Health method; its consumers declare that interface
// (stats.HealthReporter, power.HealthReporter).
package sourcehealth

import (
	"errors"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
)

// errLogEvery bounds the warnings about failed reads, as reading.Rejects
// does for rejected readings: a source failing every second must not flood
// the log, yet an operator must see it.
const errLogEvery = time.Minute

// Options tune a Tally.
type Options struct {
	// Log receives the rate-limited warnings about failed reads and
	// rejected readings; nil logs nothing.
	Log *zap.Logger
	// Now is the clock that ages the last good read (Age). Nil is for a
	// source the stats loop reads synchronously each interval: its Age
	// stays 0.
	Now func() time.Time
	// Rejects is where rejected readings are counted, when several
	// tallies share one (a GPU source's devices); nil makes the tally's
	// own, under its source's name.
	Rejects *reading.Rejects
}

// Tally is one source's health: read attempts, failures, whether the last
// read succeeded, the time of the last good one and the rejected readings
// by reason. A failing source shows as up=0 with its errors instead of
// silently freezing its figures. It is safe for concurrent use.
type Tally struct {
	source  string
	rejects *reading.Rejects
	log     *zap.Logger
	now     func() time.Time

	mu            sync.Mutex
	reads, errors uint64
	up            bool
	// late: the latest read overran its deadline.
	late          bool
	good, started time.Time
	lastErrLogged time.Time
}

// New returns the tally of the source named source ("rapl", "procfs",
// "nvml/GPU-…", "carbon/rte").
func New(source string, o Options) *Tally {
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	rej := o.Rejects
	if rej == nil {
		rej = reading.NewRejects(source, log)
	}
	t := &Tally{source: source, rejects: rej, log: log, now: o.Now}
	if t.now != nil {
		t.started = t.now()
	}
	return t
}

// Source is the name the tally reports.
func (t *Tally) Source() string { return t.source }

// Rejects is where the tally counts rejected readings.
func (t *Tally) Rejects() *reading.Rejects { return t.rejects }

// Reject counts and logs err when it is (or wraps) a *reading.Rejection,
// and reports whether it was one; what names the reading (a zone, a file).
func (t *Tally) Reject(err error, what string) bool { return t.rejects.Add(err, what) }

// Read records one attempt to read the source: err nil means it was read
// (its rejected readings, if any, counted by Reject). A failure marks the
// source down until the next good read and is logged at most once a
// minute.
func (t *Tally) Read(err error) {
	var now time.Time
	if t.now != nil {
		now = t.now()
	}
	t.ReadAt(err, now)
}

// ReadAt is Read for a read taken at at, by the tally's clock. A read
// that overran its deadline (reading.Overran) is also a rejected reading,
// reason late, unless err is a rejection the caller counted with Reject;
// while it is the latest, the source's health says why it is down
// (reading.ReasonDeadline).
func (t *Tally) ReadAt(err error, at time.Time) {
	late := reading.Overran(err)
	var rej *reading.Rejection
	if late && !errors.As(err, &rej) {
		t.rejects.Add(reading.Reject(reading.Late, 0, "%v", err), t.source)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reads++
	t.late = late
	if err == nil {
		t.up, t.good = true, at
		return
	}
	t.errors++
	t.up = false
	if at.IsZero() {
		at = time.Now()
	}
	if t.lastErrLogged.IsZero() || at.Sub(t.lastErrLogged) >= errLogEvery {
		t.lastErrLogged = at
		t.log.Warn("source read failed", zap.String("source", t.source), zap.Error(err), zap.Uint64("errors_total", t.errors))
	}
}

// Count records one read of part of the source (one cgroup, one device's
// reading) that leaves the source's state alone: err non-nil counts it as
// failed without marking the source down.
func (t *Tally) Count(err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reads++
	if err != nil {
		t.errors++
	}
}

// Up reports whether the last read succeeded.
func (t *Tally) Up() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.up
}

// Health is the tally as the snapshot reports it.
func (t *Tally) Health() reading.SourceHealth {
	t.mu.Lock()
	h := reading.SourceHealth{Source: t.source, Up: t.up, Reads: t.reads, Errors: t.errors}
	if t.late && !t.up {
		h.Reason = reading.ReasonDeadline
	}
	if t.now != nil {
		since := t.good
		if since.IsZero() {
			since = t.started
		}
		h.Age = t.now().Sub(since)
	}
	t.mu.Unlock()
	h.Rejected = t.rejects.Counts()
	return h
}
