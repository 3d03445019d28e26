package stats

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// The loop steps on demand (Config.OnDemand): a step runs when someone
// asks for figures fresher than the latest snapshot (a scrape, through
// Fresh), and otherwise only as often as a source needs to be read. Every
// counter the loop reads is cumulative (the kernel's per-task runtime, the
// meters' energy), so an interval of 15 s gives the same totals as three
// of 5 s: fewer steps lose nothing, they only cost less. The background
// cadence (gap) covers what is not cumulative or could be lost if read too
// seldom:
//
//   - a meter counter that wraps (RAPL's energy_uj): read before it could
//     wrap twice (ReadWithin);
//   - GPUs: NVML keeps per-process utilization samples only for a while,
//     so the GPU stage keeps stats.interval;
//   - the BPF exit maps, which hold the processes that ended between two
//     reads (32,768 entries) and the map-backed per-task state: bounded by
//     stats.max-gap;
//   - carbon intensity: the factor in force is polled (a cache read) every
//     stats.interval, and a change steps the loop at once, pricing the
//     energy until then at the factor it was used under.

// request asks the loop's goroutine for a snapshot no older than maxAge.
type request struct {
	maxAge time.Duration
	done   chan *snapshot.Snapshot
}

// Fresh returns a snapshot no older than maxAge (stats.interval when
// maxAge ≤ 0), stepping the loop first when the latest is older. It is
// safe from any goroutine; concurrent callers share one step. Consumers
// that need figures at a cadence of their own without scrapes (writing
// per-VM energy files every N seconds) call it on their own ticker:
//
//	for range time.Tick(n) { s := loop.Fresh(ctx, n); … }
//
// It never blocks longer than ctx allows: on cancellation, before the
// first step, or when Run is not running, it returns the latest snapshot
// as it is (nil before the first step).
func (l *Loop) Fresh(ctx context.Context, maxAge time.Duration) *snapshot.Snapshot {
	if maxAge <= 0 {
		maxAge = l.cfg.Interval
	}
	l.pace.ask(time.Now())
	select {
	case l.asked <- struct{}{}:
	default:
	}
	s := l.snap.Load()
	if s == nil || time.Since(s.Time) < maxAge || !l.running.Load() {
		// Before the baseline there is nothing to step towards (the
		// first steps come on their own, within a second): a scrape
		// then must not wait for them.
		return s
	}
	r := request{maxAge: maxAge, done: make(chan *snapshot.Snapshot, 1)}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return l.snap.Load()
	case <-l.stopped:
		return l.snap.Load()
	}
	select {
	case s := <-r.done:
		return s
	case <-ctx.Done():
		return l.snap.Load()
	}
}

// pace learns the period of the asks (Prometheus scrapes at a fixed
// interval and phase), so that the loop can step just before the next
// one: the scrape then finds a fresh snapshot and pays only its rendering.
// The CPU is the same (one step per scrape); the latency is not.
type pace struct {
	mu      sync.Mutex
	last    time.Time
	prevGap time.Duration
	period  time.Duration // 0 while the asks are irregular
}

func (p *pace) ask(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.last.IsZero() {
		gap := now.Sub(p.last)
		d := gap - p.prevGap
		if p.prevGap > 0 && d < gap/10 && -d < gap/10 {
			p.period = gap
		} else {
			p.period = 0
		}
		p.prevGap = gap
	}
	p.last = now
}

func (p *pace) lastAsk() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// next is when the next ask is expected, zero when unknown.
func (p *pace) next() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.period == 0 {
		return time.Time{}
	}
	return p.last.Add(p.period)
}

// lead is how long before an expected ask the loop steps: well within
// the interval, so the ask finds the snapshot fresh, and long enough for
// a step on a busy node.
func (l *Loop) lead() time.Duration { return min(time.Second, l.cfg.Interval/2) }

// OnStepAhead sets fn to be told, on a goroutine of its own, of each
// snapshot stepped ahead of an expected ask: the telemetry handler renders
// it then, so that the scrape finds its bytes ready. Call before Run.
func (l *Loop) OnStepAhead(fn func(*snapshot.Snapshot)) { l.ahead = fn }

// Steps is how many steps the loop has finished (the baseline included).
func (l *Loop) Steps() uint64 { return l.steps.Load() }

// Gap is the longest the loop goes without a step when nobody asks for
// one: the smallest of stats.max-gap and what the sources need. In timer
// mode it is stats.interval.
func (l *Loop) Gap() time.Duration { return l.gap }

// backgroundGap works out Gap once the loop's parts are known.
func (l *Loop) backgroundGap() time.Duration {
	if !l.cfg.OnDemand {
		return l.cfg.Interval
	}
	gap := l.cfg.MaxGap
	if gap <= 0 {
		gap = DefaultMaxGap
	}
	if w, ok := l.meter.(ReadWithin); ok {
		if d := w.ReadWithin(); d > 0 && d < gap {
			gap = d
		}
	}
	for _, s := range l.stages {
		if g, ok := s.(gapper); ok && g.maxGap() < gap {
			gap = g.maxGap()
		}
	}
	return max(gap, l.cfg.Interval)
}

// DefaultMaxGap bounds the loop's quiet time when stats.max-gap is unset:
// at a sustained 500 process exits a second the BPF exit map (32,768
// entries) still holds a minute of them.
const DefaultMaxGap = time.Minute

// stepNow steps the loop at the current time.
func (l *Loop) stepNow(ctx context.Context) {
	l.step(ctx, time.Now())
}

// runOnDemand is Run's loop in on-demand mode, after the first two steps.
func (l *Loop) runOnDemand(ctx context.Context) {
	quiet := time.NewTimer(l.gap)
	defer quiet.Stop()
	var poll <-chan time.Time
	if len(l.watchers) > 0 {
		t := time.NewTicker(l.cfg.Interval)
		defer t.Stop()
		poll = t.C
	}
	pre := time.NewTimer(time.Hour)
	pre.Stop()
	defer pre.Stop()
	l.log.Debug("stats loop on demand", zap.Duration("gap", l.gap), zap.Duration("interval", l.cfg.Interval))
	stepped := func() {
		if !quiet.Stop() {
			select {
			case <-quiet.C:
			default:
			}
		}
		quiet.Reset(l.gap)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-l.reqs:
			if s := l.snap.Load(); s == nil || time.Since(s.Time) >= r.maxAge {
				l.stepNow(ctx)
				stepped()
			}
			r.done <- l.snap.Load()
		case <-l.asked:
			// Step just before the next ask, when the asks are
			// regular and further apart than the interval.
			pre.Stop()
			if next := l.pace.next(); !next.IsZero() && next.Sub(l.pace.lastAsk()) > l.cfg.Interval {
				pre.Reset(time.Until(next.Add(-l.lead())))
			}
		case <-pre.C:
			if s := l.snap.Load(); s == nil || time.Since(s.Time) >= l.lead() {
				t := time.Now()
				l.stepNow(ctx)
				stepped()
				l.log.Debug("stepped ahead of the expected ask", zap.Duration("took", time.Since(t)))
				if l.ahead != nil {
					go l.ahead(l.snap.Load())
				}
			}
		case <-quiet.C:
			l.stepNow(ctx)
			quiet.Reset(l.gap)
		case <-poll:
			changed := false
			for _, w := range l.watchers {
				changed = changed || w.changed()
			}
			if changed {
				// The energy up to now was used under the input
				// fixed at the last step: price it at that one.
				l.keepFactor = true
				l.stepNow(ctx)
				l.keepFactor = false
				for _, w := range l.watchers {
					w.adopt() // the new one, from now on
				}
				stepped()
			}
		}
	}
}

// serve answers requests that arrive while the timer loop runs: in timer
// mode Fresh still steps when the latest snapshot is too old.
func (l *Loop) serve(ctx context.Context, r request) {
	if s := l.snap.Load(); s == nil || time.Since(s.Time) >= r.maxAge {
		l.stepNow(ctx)
	}
	r.done <- l.snap.Load()
}
