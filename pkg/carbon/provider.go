package carbon

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// MaxGramsPerKWh is the ceiling above which a factor is absurd. The dirtiest
// fuel (lignite, lifecycle) is about 1,100-1,200 g/kWh; 2,000 leaves room
// for marginal signals while catching unit mistakes (lb/MWh read as g/kWh
// is ×2.2, kg/MWh as g/kWh is ×1, g/MWh as g/kWh is ×1,000).
const MaxGramsPerKWh = 2000

// Sample is one factor as a source reported it.
type Sample struct {
	GramsPerKWh float64
	// At is the time the source says the factor applies to (RTE's
	// date_heure, Electricity Maps' datetime, WattTime's point_time); zero
	// when the source gives none.
	At time.Time
}

// Fetcher reads a source's current factor for its configured zone. It must
// honour ctx: the Provider cancels it after its timeout. Errors that are
// *reading.Rejection are counted by reason.
type Fetcher interface {
	// Name is the provider's name: "constant", "static", "rte",
	// "electricitymaps", "watttime".
	Name() string
	// Zone is the zone queried: a country code, "FR", a WattTime region.
	Zone() string
	Fetch(ctx context.Context) (Sample, error)
}

// fixed is implemented by fetchers whose value does not age (a configured
// constant, a yearly table): their Age is always zero.
type fixed interface{ fixed() }

// ProviderOptions tune one provider.
type ProviderOptions struct {
	// Refresh is the time between fetches (default 5 min).
	Refresh time.Duration
	// Timeout bounds one fetch (default 10 s).
	Timeout time.Duration
	// Log receives rate-limited rejection warnings and fetch errors; nil
	// logs nothing.
	Log *zap.Logger
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
}

// Provider caches one Fetcher's last good factor. Poll fetches; Run polls
// every Refresh in the background; Current, Intensity and Health only read
// the cache and never block on the network.
type Provider struct {
	f       Fetcher
	refresh time.Duration
	timeout time.Duration
	now     func() time.Time
	tall    *sourcehealth.Tally
	fixed   bool

	mu      sync.Mutex
	last    Sample
	goodAt  time.Time // host time of the last good fetch
	hasGood bool
}

// NewProvider wraps f.
func NewProvider(f Fetcher, o ProviderOptions) *Provider {
	if o.Refresh <= 0 {
		o.Refresh = 5 * time.Minute
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	_, isFixed := f.(fixed)
	src := "carbon/" + f.Name()
	return &Provider{f: f, refresh: o.Refresh, timeout: o.Timeout, now: o.Now,
		tall: sourcehealth.New(src, sourcehealth.Options{Log: o.Log}), fixed: isFixed}
}

// Name is the provider's name.
func (p *Provider) Name() string { return p.f.Name() }

// Zone is the zone it queries.
func (p *Provider) Zone() string { return p.f.Zone() }

// Poll fetches once, bounded by the timeout, validates the value and
// updates the cache. A failure keeps the last good value.
func (p *Provider) Poll(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.timeout)
	defer cancel()
	s, err := p.f.Fetch(ctx)
	if err == nil {
		if cerr := reading.CheckGauge(s.GramsPerKWh, MaxGramsPerKWh); cerr != nil {
			err = fmt.Errorf("%s %s: %w", p.f.Name(), p.f.Zone(), cerr)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// A failed fetch is logged at most once a minute (the tally's), so
	// an unreachable API does not flood the log; a rejected value is
	// counted and logged by reason.
	p.tall.Reject(err, p.f.Zone())
	p.tall.Read(err)
	if err != nil {
		return err
	}
	if p.hasGood && !s.At.IsZero() && s.At.Before(p.last.At) {
		// An older value than the one held (a lagging replica): keep
		// the newer one; the source is reachable, so it stays up.
		return nil
	}
	p.last, p.goodAt, p.hasGood = s, p.now(), true
	return nil
}

// Run polls at once and then every Refresh until ctx ends.
func (p *Provider) Run(ctx context.Context) {
	t := time.NewTicker(p.refresh)
	defer t.Stop()
	for {
		_ = p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Value is a provider's cached factor.
type Value struct {
	Provider, Zone string
	GramsPerKWh    float64
	// Age is the time since the moment the factor applies to when the
	// source dates it, else since the last good fetch; 0 for fixed
	// factors (constant, yearly table).
	Age time.Duration
	Up  bool
}

// Current returns the cached factor; ok is false before the first good one.
func (p *Provider) Current() (v Value, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.valueLocked(), p.hasGood
}

func (p *Provider) valueLocked() Value {
	v := Value{Provider: p.f.Name(), Zone: p.f.Zone(), GramsPerKWh: p.last.GramsPerKWh, Up: p.tall.Up()}
	if p.hasGood && !p.fixed {
		ref := p.goodAt
		if !p.last.At.IsZero() {
			ref = p.last.At
		}
		if a := p.now().Sub(ref); a > 0 {
			v.Age = a
		}
	}
	return v
}

// Intensity is the cached factor as the snapshot shows it; ok is false
// before the first good value.
func (p *Provider) Intensity() (reading.Intensity, bool) {
	v, ok := p.Current()
	return reading.Intensity{Provider: v.Provider, Zone: v.Zone, GramsPerKWh: v.GramsPerKWh, Age: v.Age, Up: v.Up}, ok
}

// Health reports the provider as source "carbon/<name>".
func (p *Provider) Health() reading.SourceHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.tall.Health()
	if p.hasGood {
		h.Age = p.valueLocked().Age
	}
	return h
}

// unreadable is the rejection of an answer that holds no usable value
// (garbage JSON, a null field, a missing record).
func unreadable(format string, args ...any) error {
	return reading.Reject(reading.Unreadable, 0, format, args...)
}
