package power

import (
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/snapshot"
)

// tally is a meter's health: read attempts, failures, the time of the last
// good reading and the rejected readings by reason. Every meter keeps one,
// so a failing source shows as up=0 with its errors instead of silently
// freezing its zones.
type tally struct {
	source  string
	rejects *reading.Rejects
	log     *zap.Logger
	now     func() time.Time

	mu            sync.Mutex
	reads, errors uint64
	up            bool
	good, started time.Time
	lastErr       error
	lastErrLogged time.Time
}

func newTally(source string, log *zap.Logger, now func() time.Time) *tally {
	if log == nil {
		log = zap.NewNop()
	}
	if now == nil {
		now = time.Now
	}
	return &tally{source: source, rejects: reading.NewRejects(source, log), log: log, now: now, started: now()}
}

// errLogEvery bounds the warnings about failed reads, as reading.Rejects
// does for rejected readings.
const errLogEvery = time.Minute

// result records one read attempt made at now: err nil means every reading
// was good.
func (t *tally) result(err error, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reads++
	if err == nil {
		t.up, t.good, t.lastErr = true, now, nil
		return
	}
	t.errors++
	t.up, t.lastErr = false, err
	if t.lastErrLogged.IsZero() || now.Sub(t.lastErrLogged) >= errLogEvery {
		t.lastErrLogged = now
		t.log.Warn("power meter read failed", zap.String("source", t.source), zap.Error(err), zap.Uint64("errors_total", t.errors))
	}
}

// health is the snapshot of the tally.
func (t *tally) health() snapshot.SourceHealth {
	t.mu.Lock()
	defer t.mu.Unlock()
	since := t.good
	if since.IsZero() {
		since = t.started
	}
	return snapshot.SourceHealth{Source: t.source, Up: t.up, Age: t.now().Sub(since),
		Reads: t.reads, Errors: t.errors, Rejected: t.rejects.Counts()}
}

// healthOf is a meter's health however it reports it: HealthReporter or a
// Cached's SourceHealth. Every meter of this package has one of them; a
// foreign meter without either is read synchronously by the stats loop,
// which sees its failures, and is reported as up here.
func healthOf(m Meter) []snapshot.SourceHealth {
	switch h := m.(type) {
	case HealthReporter:
		return h.Health()
	case interface{ SourceHealth() snapshot.SourceHealth }:
		return []snapshot.SourceHealth{h.SourceHealth()}
	}
	return []snapshot.SourceHealth{{Source: m.Name(), Up: true, Rejected: map[string]uint64{}}}
}

// Health implements HealthReporter: the health of every member, in
// precedence order.
func (c *Combined) Health() []snapshot.SourceHealth {
	var out []snapshot.SourceHealth
	for _, m := range c.meters {
		out = append(out, healthOf(m)...)
	}
	return out
}
