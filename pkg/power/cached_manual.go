package power

import (
	"context"
	"time"
)

// NewManualCached returns a Cached without its own goroutine, reading the
// given clock: the caller schedules device reads with Poll. For callers
// that already run a loop, and for deterministic tests of integration and
// staleness.
func NewManualCached(r PowerReader, now func() time.Time) *Cached {
	return newCached(r, time.Second, 5*time.Second, MeterOptions{Now: now}, false)
}

// NewManualCachedWith is NewManualCached with options (o.Now is the clock).
func NewManualCachedWith(r PowerReader, o MeterOptions) *Cached {
	return newCached(r, time.Second, 5*time.Second, o, false)
}

// Poll reads the device once, synchronously (NewManualCached meters).
func (c *Cached) Poll(ctx context.Context) { c.poll(ctx) }
