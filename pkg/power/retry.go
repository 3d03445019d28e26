package power

import (
	"context"

	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Retrying stands for a configured meter that could not be used at start
// (a BMC down or answering 500): rather than dropping it for the life of
// the process, it tries to open it again in the background, with backoff,
// and adopts it once it works. Until then Read fails (a Combined meter
// carries on with its other members) and Health shows the meter down, so
// the failure is visible, not silent.
type Retrying struct {
	name string
	open func(ctx context.Context) (Meter, error)
	log  *zap.Logger
	now  func() time.Time

	mu       sync.Mutex
	m        Meter
	attempts uint64
	failures uint64
	lastErr  error
	since    time.Time

	cancel context.CancelFunc
	done   chan struct{}
}

// RetryOptions tune Retrying; zero values take the defaults.
type RetryOptions struct {
	Log *zap.Logger
	// Initial is the first wait (default 5s); each failure doubles it up
	// to Max (default 5m).
	Initial, Max time.Duration
	Now          func() time.Time
}

// NewRetrying starts retrying open. firstErr is why the meter could not be
// used at start (counted as the first failed attempt).
func NewRetrying(name string, firstErr error, open func(ctx context.Context) (Meter, error), o RetryOptions) *Retrying {
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Initial <= 0 {
		o.Initial = 5 * time.Second
	}
	if o.Max < o.Initial {
		o.Max = 5 * time.Minute
		if o.Max < o.Initial {
			o.Max = o.Initial
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Retrying{name: name, open: open, log: o.Log, now: o.Now, attempts: 1, failures: 1,
		lastErr: firstErr, since: o.Now(), cancel: cancel, done: make(chan struct{})}
	o.Log.Warn("configured power meter unusable; retrying in the background",
		zap.String("source", name), zap.Error(firstErr), zap.Duration("retry_in", o.Initial))
	go r.loop(ctx, o.Initial, o.Max)
	return r
}

func (r *Retrying) loop(ctx context.Context, wait, max time.Duration) {
	defer close(r.done)
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		m, err := r.open(ctx)
		r.mu.Lock()
		r.attempts++
		if err == nil {
			r.m, r.lastErr = m, nil
			r.mu.Unlock()
			r.log.Warn("configured power meter recovered and adopted", zap.String("source", r.name),
				zap.Uint64("attempts", r.attempts))
			return
		}
		r.failures++
		r.lastErr = err
		n := r.attempts
		r.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		wait = min(2*wait, max)
		r.log.Warn("configured power meter still unusable", zap.String("source", r.name), zap.Error(err),
			zap.Uint64("attempts", n), zap.Duration("retry_in", wait))
	}
}

// Adopted returns the meter once it works, nil before.
func (r *Retrying) Adopted() Meter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m
}

// Name implements Meter.
func (r *Retrying) Name() string { return r.name }

// Estimated implements Meter: what is retried is a measurement.
func (r *Retrying) Estimated() bool { return false }

// Read implements Meter: the adopted meter's figures, or ErrNoReading.
func (r *Retrying) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	r.mu.Lock()
	m, err := r.m, r.lastErr
	r.mu.Unlock()
	if m == nil {
		return nil, fmt.Errorf("%s: %w (retrying: %v)", r.name, ErrNoReading, err)
	}
	return m.Read(ctx)
}

// Health implements HealthReporter: down with its failed attempts until
// adopted, then the adopted meter's own health.
func (r *Retrying) Health() []reading.SourceHealth {
	r.mu.Lock()
	m := r.m
	h := reading.SourceHealth{Source: r.name, Age: r.now().Sub(r.since), Reads: r.attempts, Errors: r.failures,
		Rejected: map[string]uint64{}}
	r.mu.Unlock()
	if m == nil {
		return []reading.SourceHealth{h}
	}
	return healthOf(m)
}

// Age, LastError and Reads make a Retrying meter report like a background
// meter (Cached) while it is not adopted.
func (r *Retrying) Age() time.Duration {
	if c, ok := r.Adopted().(interface{ Age() time.Duration }); ok {
		return c.Age()
	}
	return r.now().Sub(r.since)
}

// LastError is why the meter is not adopted yet, or the adopted meter's.
func (r *Retrying) LastError() error {
	r.mu.Lock()
	m, err := r.m, r.lastErr
	r.mu.Unlock()
	if c, ok := m.(interface{ LastError() error }); ok {
		return c.LastError()
	}
	return err
}

// Reads counts the attempts to open, then the adopted meter's reads.
func (r *Retrying) Reads() (total, failed uint64) {
	r.mu.Lock()
	m, a, f := r.m, r.attempts, r.failures
	r.mu.Unlock()
	if c, ok := m.(interface{ Reads() (uint64, uint64) }); ok {
		t, ff := c.Reads()
		return a + t, f + ff
	}
	return a, f
}

// Close stops retrying and closes the adopted meter.
func (r *Retrying) Close() error {
	r.cancel()
	<-r.done
	if c, ok := r.Adopted().(interface{ Close() error }); ok {
		return c.Close()
	}
	return nil
}
