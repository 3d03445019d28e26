package power

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/reading"
)

// Reading is one zone's figure as a slow meter (a BMC, a hwmon power
// sensor) reports it at one moment: either an energy counter of the
// device's own or an instantaneous power.
type Reading struct {
	Zone   string
	Socket int
	// Energy says Joules holds the device's cumulative energy counter
	// (any origin; only its differences are used). Otherwise Watts holds
	// the power at Time.
	Energy bool
	Joules float64
	Watts  float64
	// Max is the device's own declared upper bound for Watts (a Redfish
	// sensor's ReadingRangeMax); 0 when it declares none. A reading above
	// it, or above the zone's configured ceiling, is rejected.
	Max float64
	// Time is when the device took the reading, if it says (a BMC's
	// DCMI timestamp, a Redfish sensor's ReadingTime); zero otherwise, and
	// the time the read returned is used instead.
	Time time.Time
}

// PowerReader is a meter that may be slow or give only power. It must
// honour ctx: NewCached cancels it after its timeout.
type PowerReader interface {
	Name() string
	ReadPower(ctx context.Context) ([]Reading, error)
}

// ErrNoReading is returned by Cached.Read before the first good reading.
var ErrNoReading = errors.New("no reading yet")

// Cached turns a PowerReader into a Meter whose Read never touches the
// device. A goroutine reads the device every interval (each read bounded by
// timeout) and keeps, per zone, a cumulative energy:
//
//   - every reading is validated first (pkg/reading): an energy counter
//     passes reading.Counter against the zone's power ceiling, so a counter
//     that went backwards (BMC reboot) or jumped contributes nothing for
//     that step; a power reading must be finite, not negative and within
//     both the device's declared range and the zone's ceiling. A rejected
//     reading is counted by reason, logged at warn (rate-limited) and
//     skipped: the next good one spans the gap, so nothing is invented;
//   - power readings are integrated with the trapezoid rule over the
//     device's timestamps when it gives them, else over the times the reads
//     returned. A reading whose device timestamp has not advanced is the
//     same sample again and is skipped (the next new one spans the gap).
//
// A device that fails or stops updating keeps its last cumulative value
// and Age grows; that never affects another meter.
type Cached struct {
	r        PowerReader
	interval time.Duration
	timeout  time.Duration
	now      func() time.Time
	maxWatts MaxWatts
	tall     *sourcehealth.Tally // logs failed reads and counts rejected readings

	// pollMu makes a poll and what follows it (LeaveOutDevices' switch)
	// one step: no background poll falls in between.
	pollMu sync.Mutex

	mu    sync.Mutex
	zones map[zoneKey]*cachedZone
	// paused are zones another source counts now (LeaveOutDevices):
	// still read, so their baselines stay current, never added to.
	paused  map[zoneKey]bool
	order   []zoneKey
	fresh   time.Time // host time of the last reading that brought a new sample
	started time.Time
	lastErr error

	cancel context.CancelFunc
	done   chan struct{}
}

type zoneKey struct {
	zone   string
	socket int
}

type cachedZone struct {
	joules  float64
	primed  bool
	energy  bool
	ctr     reading.Counter // the device's energy counter, validated
	prevW   float64         // last accepted power
	prevDev time.Time       // last device timestamp (zero if none)
	prevT   time.Time       // host time of the last sample
}

// NewCached starts reading r every interval, each read bounded by timeout
// (at most interval when timeout is 0 or larger). Close stops it.
func NewCached(r PowerReader, interval, timeout time.Duration) *Cached {
	return newCached(r, interval, timeout, MeterOptions{}, true)
}

// NewCachedWith is NewCached with a logger for failed reads and rejected
// readings, and per-zone ceilings.
func NewCachedWith(r PowerReader, interval, timeout time.Duration, o MeterOptions) *Cached {
	return newCached(r, interval, timeout, o, true)
}

func newCached(r PowerReader, interval, timeout time.Duration, o MeterOptions, run bool) *Cached {
	now := o.now()
	if interval <= 0 {
		interval = time.Second
	}
	if timeout <= 0 || timeout > interval {
		// A read slower than the interval would only delay the next one.
		timeout = interval
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cached{
		r: r, interval: interval, timeout: timeout, now: now, maxWatts: o.MaxWatts,
		tall:  sourcehealth.New(r.Name(), sourcehealth.Options{Log: o.Log, Now: now}),
		zones: make(map[zoneKey]*cachedZone), started: now(),
		cancel: cancel, done: make(chan struct{}),
	}
	if run {
		go c.loop(ctx)
	} else {
		close(c.done)
	}
	return c
}

func (c *Cached) loop(ctx context.Context) {
	defer close(c.done)
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		c.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll reads the device once and folds the result in.
func (c *Cached) poll(ctx context.Context) {
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	c.pollLocked(ctx, time.Time{})
}

// pollLocked reads the device and folds the readings in as taken at at
// (zero: when the read returned).
func (c *Cached) pollLocked(ctx context.Context, at time.Time) {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	readings, err := c.r.ReadPower(rctx)
	cancel()
	if err == nil && rctx.Err() == context.DeadlineExceeded {
		// Late figures are dropped, never credited: the reader ignored
		// its context. The tally counts the read as late.
		readings, err = nil, fmt.Errorf("read took longer than %v: %w", c.timeout, context.DeadlineExceeded)
	}
	if at.IsZero() {
		at = c.now()
	}
	c.fold(readings, err, at)
}

func (c *Cached) fold(readings []Reading, err error, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil && len(readings) == 0 {
		err = errors.New("meter returned no readings")
	}
	if err != nil {
		c.lastErr = fmt.Errorf("%s: %w", c.r.Name(), err)
		c.tall.ReadAt(c.lastErr, at)
		return
	}
	var rejected []error
	for _, rd := range readings {
		k := zoneKey{rd.Zone, rd.Socket}
		z := c.zones[k]
		if z == nil {
			z = &cachedZone{}
		}
		fresh, err := z.add(rd, at, c.maxWatts.ceiling(rd.Zone, rd.Socket), !c.paused[k])
		if err != nil {
			c.tall.Reject(err, fmt.Sprintf("%s/%d", rd.Zone, rd.Socket))
			rejected = append(rejected, err)
		}
		if z.primed && c.zones[k] == nil {
			// A zone appears with its first accepted reading.
			c.zones[k] = z
			c.order = append(c.order, k)
		}
		if fresh {
			c.fresh = at
		}
	}
	if len(rejected) == len(readings) {
		// Nothing usable came back: the meter answers but is not up.
		c.lastErr = fmt.Errorf("%s: every reading rejected: %w", c.r.Name(), errors.Join(rejected...))
		c.tall.ReadAt(c.lastErr, at)
		return
	}
	c.lastErr = nil
	c.tall.ReadAt(nil, at)
}

// add validates one reading and folds it into the zone; a zone not
// counted (paused) only moves its baseline. It reports whether it was a
// new sample, and the rejection when it was refused.
func (z *cachedZone) add(rd Reading, at time.Time, ceiling float64, count bool) (bool, error) {
	if !rd.Energy {
		limit := ceiling
		if rd.Max > 0 && rd.Max < limit {
			limit = rd.Max
		}
		if err := reading.CheckGauge(rd.Watts, limit); err != nil {
			return false, err
		}
	}
	if !z.primed || z.energy != rd.Energy {
		// First sample, or the device switched between energy and
		// power (a BMC firmware update): restart the baseline.
		z.primed, z.energy = true, rd.Energy
		z.ctr = reading.Counter{MaxRate: ceiling}
		if rd.Energy {
			if _, err := z.ctr.Observe(rd.Joules, at); err != nil {
				z.primed = false
				return false, err
			}
		}
		z.prevW, z.prevDev, z.prevT = rd.Watts, rd.Time, at
		return true, nil
	}
	if !rd.Time.IsZero() && !z.prevDev.IsZero() && !rd.Time.After(z.prevDev) {
		return false, nil // the device's sample has not changed
	}
	if rd.Energy {
		d, err := z.ctr.Observe(rd.Joules, at)
		if err != nil {
			return false, err
		}
		if count {
			z.joules += d
		}
		z.prevDev, z.prevT = rd.Time, at
		return true, nil
	}
	dt := at.Sub(z.prevT)
	if !rd.Time.IsZero() && !z.prevDev.IsZero() {
		// The BMC's clock times its own samples; trust it unless it
		// jumped (NTP step, reset) far beyond the host's elapsed time.
		if dev := rd.Time.Sub(z.prevDev); dev <= 2*dt+10*time.Second {
			dt = dev
		}
	}
	if dt > 0 && count {
		z.joules += (z.prevW + rd.Watts) / 2 * dt.Seconds()
	}
	z.prevW, z.prevDev, z.prevT = rd.Watts, rd.Time, at
	return true, nil
}

// Name implements Meter.
func (c *Cached) Name() string { return c.r.Name() }

// Estimated implements Meter: slow meters are measurements.
func (c *Cached) Estimated() bool { return false }

// Read implements Meter with the cached figures; it never blocks on the
// device. Before the first good reading it fails with ErrNoReading (and
// the device's error, if any).
func (c *Cached) Read(_ context.Context) ([]reading.ZoneSample, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.order) == 0 {
		if c.lastErr != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoReading, c.lastErr)
		}
		return nil, fmt.Errorf("%s: %w", c.r.Name(), ErrNoReading)
	}
	out := make([]reading.ZoneSample, len(c.order))
	for i, k := range c.order {
		out[i] = reading.ZoneSample{Zone: k.zone, Socket: k.socket, Joules: c.zones[k].joules}
	}
	return out, nil
}

// Age is how long ago the device last gave a new sample (since start when
// it never has): the staleness of what Read returns.
func (c *Cached) Age() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fresh.IsZero() {
		return c.now().Sub(c.started)
	}
	return c.now().Sub(c.fresh)
}

// LastError is the error of the latest device read, nil if it succeeded.
func (c *Cached) LastError() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Reads returns how many device reads were attempted and how many failed.
func (c *Cached) Reads() (total, failed uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.tall.Health()
	return h.Reads, h.Errors
}

// SourceHealth is the device's health: reads, failures, staleness and the
// readings rejected by validation. (Cached's Health method, reporting this
// one source, is built on it.)
func (c *Cached) SourceHealth() reading.SourceHealth {
	h := c.tall.Health()
	h.Age = c.Age()
	return h
}

// WaitFirst blocks until the first good reading, the first failure, or
// ctx ends; start-up uses it to check a meter works before choosing it.
func (c *Cached) WaitFirst(ctx context.Context) error {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		c.mu.Lock()
		ok, err, n := len(c.order) > 0, c.lastErr, c.tall.Health().Reads
		c.mu.Unlock()
		switch {
		case ok:
			return nil
		case n > 0 && err != nil:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: first reading: %w", c.r.Name(), ctx.Err())
		case <-t.C:
		}
	}
}

// DeviceZoner is a PowerReader whose zones are devices' (hwmon's GPU
// chips), so that LeaveOutDevices can name them.
type DeviceZoner interface {
	// DeviceZones are the zones of the devices in pci (PCI addresses).
	DeviceZones(pci map[string]bool) []ZoneID
}

// ZoneID names a zone of a meter.
type ZoneID struct {
	Zone   string
	Socket int
}

// Reader is the PowerReader c reads.
func (c *Cached) Reader() PowerReader { return c.r }

// Local is a PowerReader that reads a device of this machine in
// microseconds (hwmon's sysfs files), not a remote one (a BMC).
type Local interface{ Local() bool }

// Refresh reads the device now, in the caller, when it is local, so
// that Read returns what it says now rather than at its last poll; a
// remote device is left to its schedule. It reports whether it read.
func (c *Cached) Refresh(ctx context.Context) bool {
	if l, ok := c.r.(Local); !ok || !l.Local() {
		return false
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	c.pollLocked(ctx, time.Time{})
	return true
}

// Refresh refreshes every meter m combines that reads a local device in
// the background (Cached.Refresh): a process that reads the meters at
// instants of its own (`wattrace measure`, at a command's start and end)
// then gets their energy up to that instant, not up to their last poll.
func Refresh(ctx context.Context, m Meter) {
	if c, ok := m.(*Cached); ok {
		c.Refresh(ctx)
	}
	if cm, ok := m.(interface{ Meters() []Meter }); ok {
		for _, x := range cm.Meters() {
			Refresh(ctx, x)
		}
	}
}

// LeaveOutDevices stops counting the zones of the devices in pci (PCI
// addresses) from now on, and counts again those of devices no longer
// in it: another source (a GPU source that came up after start) reads
// them per device now. The device is read at the switch itself, so what
// a zone used up to now stays with the side that counted it so far; a
// left-out zone keeps its total, which stops growing, so a reader that
// took a reading before the switch still has its energy up to the
// switch. The switch's reading is taken as of at (the instant the other
// source takes over: its first reading's), so neither counts the time
// between that instant and this read. It reports false when the reader
// does not name devices' zones.
func (c *Cached) LeaveOutDevices(pci map[string]bool, at time.Time) bool {
	dz, ok := c.r.(DeviceZoner)
	if !ok {
		return false
	}
	paused := map[zoneKey]bool{}
	for _, z := range dz.DeviceZones(pci) {
		paused[zoneKey{z.Zone, z.Socket}] = true
	}
	c.pollMu.Lock()
	defer c.pollMu.Unlock()
	c.mu.Lock()
	same := maps.Equal(paused, c.paused)
	c.mu.Unlock()
	if same {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	c.pollLocked(ctx, at)
	c.mu.Lock()
	c.paused = paused
	c.mu.Unlock()
	return true
}

// Close stops the reading goroutine and closes the reader if it is a
// Closer.
func (c *Cached) Close() error {
	c.cancel()
	<-c.done
	if cl, ok := c.r.(interface{ Close() error }); ok {
		return cl.Close()
	}
	return nil
}

// Health implements HealthReporter: the meter read in the background is
// one source, up while its latest device read succeeded.
func (c *Cached) Health() []reading.SourceHealth {
	return []reading.SourceHealth{c.SourceHealth()}
}
