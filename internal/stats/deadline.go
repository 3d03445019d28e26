package stats

import (
	"context"
	"errors"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Each step reads its sources under one context whose deadline is the
// step's read timeout (readTimeout) after the accounting's read:
// Config.ReadTimeout, which the exporter sets from power.meter-timeout, at
// most stats.interval, and half of stats.interval when unset. A read that overruns it is cut off:
// the step goes on without it, the source's figures stay where they were
// (its counters are cumulative, so the next good read spans the gap), and
// the overrun is counted as a rejected reading (reason late) and shown as
// the source's health reason (reading.ReasonDeadline).

// readTimeout is how long a step waits for a source's read.
func (c Config) readTimeout() time.Duration {
	switch {
	case c.ReadTimeout <= 0:
		return c.Interval / 2
	case c.ReadTimeout > c.Interval:
		return c.Interval
	}
	return c.ReadTimeout
}

// errStillReading is why a read was not started: the one cut off at an
// earlier deadline has not returned yet.
var errStillReading = errors.New("the read cut off at an earlier step's deadline has not returned")

// deadlined runs one source's reads under the steps' deadlines. A read
// that honours its context returns at the deadline; one that does not
// (a file on a hung mount, a library call) is left running on its own
// goroutine and its result, whenever it comes, is dropped. No second read
// starts while one is outstanding (a step waits for it up to its own
// deadline), so a source that hangs costs one goroutine, not one per
// step.
type deadlined[T any] struct {
	source  string
	timeout time.Duration
	pending chan deadlinedResult[T]
	// reads counts the reads asked for; late those cut off or not
	// started for lateness; lastLate is whether the latest was.
	reads, late uint64
	lastLate    bool
}

type deadlinedResult[T any] struct {
	v   T
	err error
}

// read calls f with ctx and waits for it until ctx is done. Its error
// for a read cut off is reading.LateRead (a rejection for lateness that
// also is context.DeadlineExceeded).
func (d *deadlined[T]) read(ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	var zero T
	d.reads++
	if d.pending != nil {
		// The read cut off last time may return within this step's
		// deadline (one that honours its context returns just after
		// it): its figures are too late to credit, and a new read
		// starts.
		select {
		case <-d.pending:
			d.pending = nil
		case <-ctx.Done():
			d.late++
			d.lastLate = true
			return zero, errors.Join(reading.LateRead(d.timeout), errStillReading)
		}
	}
	if ctx.Err() == nil {
		done := make(chan deadlinedResult[T], 1)
		go func() {
			v, err := f(ctx)
			done <- deadlinedResult[T]{v, err}
		}()
		select {
		case r := <-done:
			if !reading.Overran(r.err) {
				d.lastLate = false
				return r.v, r.err
			}
		case <-ctx.Done():
			d.pending = done
		}
	}
	d.late++
	d.lastLate = true
	return zero, reading.LateRead(d.timeout)
}

// overrun is a source's late reads as the health stage publishes them.
type overrun struct {
	source      string
	reads, late uint64
	lastLate    bool
}

func (d *deadlined[T]) overrun() overrun {
	return overrun{source: d.source, reads: d.reads, late: d.late, lastLate: d.lastLate}
}

// overrunner is a stage that reads a source under the step's deadline
// (the zones stage, the meter): the health stage adds its overruns to the
// source's health.
type overrunner interface {
	overruns() []overrun
}

// addOverruns puts each source's late reads into its entry of hs, a new
// entry when the source reports no health of its own (a combined meter,
// named after its members): rejected readings of reason late, failed
// reads, and while the latest was late, down with
// reading.ReasonDeadline.
func addOverruns(hs []reading.SourceHealth, ovs []overrun) []reading.SourceHealth {
	for _, o := range ovs {
		if o.late == 0 {
			continue
		}
		i := 0
		for ; i < len(hs) && hs[i].Source != o.source; i++ {
		}
		if i == len(hs) {
			// The source reports no health of its own: the loop's
			// reads of it are all there is.
			hs = append(hs, reading.SourceHealth{Source: o.source, Up: true, Reads: o.reads - o.late})
		}
		h := &hs[i]
		rej := make(map[string]uint64, len(h.Rejected)+1)
		for k, v := range h.Rejected {
			rej[k] = v
		}
		rej[string(reading.Late)] += o.late
		h.Rejected = rej
		h.Reads += o.late
		h.Errors += o.late
		if o.lastLate {
			h.Up = false
			if h.Reason == "" {
				h.Reason = reading.ReasonDeadline
			}
		}
	}
	return hs
}
