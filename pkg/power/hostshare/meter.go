package hostshare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/sourcehealth"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// DefaultStaleness is how long a guest waits for a new update of its share
// before it calls the host's figures stale (power.host-share.staleness).
const DefaultStaleness = 15 * time.Second

// rateSlack widens the rate check: the guest reads on its own clock, so
// one read can carry a host update or two more than its interval.
const rateSlack = 10 * time.Second

// Options configure a Meter.
type Options struct {
	// Dir is the share's mount point in the guest.
	Dir string
	// Dial, when set, reads the share over a stream instead of from Dir:
	// each Read opens a connection and decodes the one frame the host
	// writes on it (DecodeFrame). VsockDialer dials the host over vsock.
	// ctx is the Read's: the connection is closed when it is done, so a
	// host that stops mid-frame costs the read no more than its deadline.
	Dial func(ctx context.Context) (io.ReadCloser, error)
	// Where names the stream in rejections and logs (e.g. vsock:2:5924).
	Where string
	// Staleness: a share not updated for longer is stale (DefaultStaleness
	// when 0).
	Staleness time.Duration
	// MaxWatts bounds each zone's rate: a VM draws at most what a node
	// can; power.DefaultMaxWatts' platform figure when 0.
	MaxWatts float64
	Log      *zap.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// Meter reads the host's share in a guest: a power.Meter whose zones are
// the VM's energy as the host attributed it, measured by the host (method
// "measured" unless the host itself estimated), source "host:<host name>".
// Every value is validated (pkg/reading): a file that is not a number, a
// counter that went down within one epoch or grew faster than MaxWatts is
// rejected, counted in Health and never credited.
type Meter struct {
	opt  Options
	name string
	tall *sourcehealth.Tally

	mu        sync.Mutex
	epoch     string
	seq       uint64
	updated   time.Time
	changed   time.Time // guest time of the last new update
	zones     map[string]*zone
	order     []string
	methods   map[string]bool   // zone -> estimated by the host
	policies  map[string]string // zone -> the host's idle policy
	loggedErr time.Time         // the last "zone unreadable" warning
	// hostEvery is how often the host says it writes (the metadata's
	// interval_seconds, validated; 0 when absent or out of bounds).
	hostEvery time.Duration
	badEvery  bool // an out-of-bounds interval_seconds was logged
}

// maxHostInterval bounds the host's write interval the staleness follows:
// a host claiming more would keep its guests from ever falling back.
const maxHostInterval = time.Hour

type zone struct {
	ctr    reading.Counter
	totalJ float64
}

var (
	_ power.Meter          = (*Meter)(nil)
	_ power.HealthReporter = (*Meter)(nil)
)

// Present reports whether dir holds a share: its metadata file exists, or
// dir is a mount point (the share is mounted, and the host has not written
// this domain's figures yet: the estimator stands in until it does).
func Present(dir string) bool {
	if _, err := os.Stat(filepath.Join(dir, MetaFile)); err == nil {
		return true
	}
	var d, p syscall.Stat_t
	if syscall.Stat(dir, &d) != nil || syscall.Stat(filepath.Dir(filepath.Clean(dir)), &p) != nil {
		return false
	}
	return d.Mode&syscall.S_IFMT == syscall.S_IFDIR && d.Dev != p.Dev
}

// Open returns the meter of the share at o.Dir. The share's metadata
// names the host; a share whose metadata cannot be read yet is still
// opened (source "host") and reports itself down until it can.
func Open(o Options) (*Meter, error) {
	if o.Dir == "" && o.Dial == nil {
		return nil, errors.New("hostshare: no directory and no stream")
	}
	if o.Where == "" {
		o.Where = o.Dir
	}
	if o.Staleness <= 0 {
		o.Staleness = DefaultStaleness
	}
	if !(o.MaxWatts > 0) || math.IsInf(o.MaxWatts, 0) {
		o.MaxWatts = power.DefaultMaxWatts().For(reading.ZonePlatform)
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	name := "host"
	if meta, err := o.peekMeta(context.Background()); err == nil && meta.Host != "" {
		name = "host:" + meta.Host
	} else if err != nil {
		o.Log.Warn("host share metadata unreadable at start; the source is named \"host\"", zap.String("share", o.Where), zap.Error(err))
	}
	m := &Meter{opt: o, name: name, tall: sourcehealth.New(name, sourcehealth.Options{Log: o.Log}),
		zones: map[string]*zone{}, methods: map[string]bool{}, policies: map[string]string{}, changed: o.Now()}
	return m, nil
}

// Name implements power.Meter: "host:<host name>", the host of the
// latest epoch read.
func (m *Meter) Name() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.name
}

// Estimated implements power.Meter: the host measured unless it says it
// estimated every zone.
func (m *Meter) Estimated() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.methods) == 0 {
		return false
	}
	for _, est := range m.methods {
		if !est {
			return false
		}
	}
	return true
}

// IdlePolicy is the host's power.idle-policy for zone as the latest
// metadata read says ("" when not known): under "none" the zone holds the
// VM's dynamic energy only.
func (m *Meter) IdlePolicy(zone string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.policies[zone]
}

// Update identifies the latest update read: its epoch and sequence.
func (m *Meter) Update() (epoch string, seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.epoch, m.seq
}

// Stale reports whether the share has had no new update for longer than
// the staleness.
func (m *Meter) Stale() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.staleLocked(m.opt.Now())
}

func (m *Meter) staleLocked(now time.Time) bool {
	return now.Sub(m.changed) > m.stalenessLocked()
}

// stalenessLocked is how long the share may go without a new update:
// the setting, or three of the host's write intervals when longer. A host
// that writes every 15 s or more would otherwise be called stale between
// two of its own updates, and its guests would flap between its figures
// and the estimate; three intervals let one update come late or be
// missed.
func (m *Meter) stalenessLocked() time.Duration {
	return max(m.opt.Staleness, 3*m.hostEvery)
}

// Staleness is the staleness in force (the setting, or three of the
// host's write intervals when longer).
func (m *Meter) Staleness() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stalenessLocked()
}

// Read implements power.Meter: each zone's validated energy since the
// first Read. It fails when the metadata or every zone file cannot be
// read; a zone file that cannot be read or is rejected keeps its total and
// fails nothing else. Over a stream, ctx bounds the connection and the
// frame; a share on a mount is not read once ctx is done (a read already
// blocked on a hung mount is the stats loop's to abandon).
func (m *Meter) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opt.Now()
	err := m.readLocked(ctx, now)
	m.tall.ReadAt(err, now)
	if err != nil {
		return nil, err
	}
	out := make([]reading.ZoneSample, 0, len(m.order))
	for _, z := range m.order {
		method := reading.MethodMeasured
		if m.methods[z] {
			method = reading.MethodEstimated
		}
		out = append(out, reading.ZoneSample{Zone: z, Socket: -1, Joules: m.zones[z].totalJ, Source: m.name, Method: method})
	}
	return out, nil
}

func (m *Meter) readLocked(ctx context.Context, now time.Time) error {
	sh, err := m.opt.fetch(ctx)
	if err != nil {
		if errors.Is(err, ErrFrame) {
			m.tall.Reject(reading.Reject(reading.Unreadable, math.NaN(), "%v", err), m.opt.Where)
		}
		return fmt.Errorf("host share: %w", err)
	}
	meta, err := ParseMeta(sh.meta)
	if err != nil {
		m.tall.Reject(reading.Reject(reading.Unreadable, math.NaN(), "%s: %v", MetaFile, err), sh.where(MetaFile))
		return fmt.Errorf("host share: %w", err)
	}
	if err := sh.matches(meta); err != nil {
		// A frame whose counters are not the zones its metadata lists
		// is not a share: nothing of it is credited.
		m.tall.Reject(reading.Reject(reading.Unreadable, math.NaN(), "%v", err), m.opt.Where)
		return fmt.Errorf("host share: %w", err)
	}
	if meta.Epoch != m.epoch {
		if m.epoch != "" {
			m.opt.Log.Info("host share counters restarted (new epoch): taking a fresh baseline",
				zap.String("source", m.name), zap.String("epoch", meta.Epoch), zap.Uint64("resets", meta.Resets))
		}
		// A new epoch may come from another host: a guest live-migrated
		// reads the share its new host writes (a directory of its own,
		// so a new epoch), and its figures are that host's, named so.
		// The first epoch read names the host too when the metadata was
		// unreadable at Open.
		if meta.Host != "" && "host:"+meta.Host != m.name {
			old := m.name
			m.name = "host:" + meta.Host
			m.tall = sourcehealth.New(m.name, sourcehealth.Options{Log: m.opt.Log})
			m.opt.Log.Info("host share now written by another host: the source is renamed",
				zap.String("from", old), zap.String("to", m.name))
		}
		for _, z := range m.zones {
			z.ctr.Reset()
		}
		m.epoch, m.seq, m.updated, m.changed = meta.Epoch, meta.Seq, meta.Updated, now
	} else if meta.Seq != m.seq || !meta.Updated.Equal(m.updated) {
		m.seq, m.updated, m.changed = meta.Seq, meta.Updated, now
	}
	m.hostEvery = 0
	if iv := meta.IntervalSeconds; iv > 0 && iv <= maxHostInterval.Seconds() {
		m.hostEvery = time.Duration(iv * float64(time.Second))
	} else if iv != 0 && !m.badEvery {
		// Not a plausible interval: the setting alone decides.
		m.badEvery = true
		m.opt.Log.Warn("host share's interval_seconds out of bounds: ignored for staleness",
			zap.String("source", m.name), zap.Float64("interval_seconds", iv), zap.Duration("max", maxHostInterval))
	}
	var errs []error
	for _, zm := range meta.Zones {
		z := m.zones[zm.Name]
		if z == nil {
			// Within one epoch the host's counter never goes down: a
			// lower value is a glitch, never a new baseline.
			z = &zone{ctr: reading.Counter{MaxRate: m.opt.MaxWatts * 1e6, Slack: rateSlack, NeverResets: true}}
			m.zones[zm.Name] = z
			m.order = append(m.order, zm.Name)
		}
		m.methods[zm.Name] = zm.Method == "estimated"
		m.policies[zm.Name] = zm.IdlePolicy
		path := sh.where(ZoneFile(zm.Name))
		b, err := sh.counter(zm.Name)
		if err != nil {
			errs = append(errs, fmt.Errorf("host share: %w", err))
			continue
		}
		uj, err := ParseCounter(b)
		if err != nil {
			m.tall.Reject(reading.Reject(reading.Unreadable, math.NaN(), "%s: %v", path, err), path)
			errs = append(errs, fmt.Errorf("host share %s: %w", path, err))
			continue
		}
		d, err := z.ctr.Observe(float64(uj), now)
		if err != nil {
			m.tall.Reject(err, path)
			continue
		}
		z.totalJ += d / 1e6
	}
	if len(errs) == len(meta.Zones) {
		return errors.Join(errs...)
	}
	if len(errs) > 0 && now.Sub(m.loggedErr) >= time.Minute {
		// The other zones count on; the failed ones keep their totals.
		m.loggedErr = now
		m.opt.Log.Warn("host share zone unreadable", zap.String("source", m.name), zap.Error(errors.Join(errs...)))
	}
	return nil
}

// Health implements power.HealthReporter: down while reads fail or the
// share is stale; the age is that of the last new update.
func (m *Meter) Health() []reading.SourceHealth {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.opt.Now()
	h := m.tall.Health()
	h.Up = h.Up && !m.staleLocked(now)
	h.Age = now.Sub(m.changed)
	return []reading.SourceHealth{h}
}

// Rejected returns the rejected readings by reason (tests, logs).
func (m *Meter) Rejected() map[string]uint64 { return m.tall.Rejects().Counts() }

// fetched is one read of the host's share: the metadata's content and each
// zone's counter content, from the directory's files or from one frame.
type fetched struct {
	meta    []byte
	counter func(zone string) ([]byte, error)
	where   func(file string) string
	// frame: the counters a frame carried (nil for a directory, whose
	// files are read one by one).
	frame map[string][]byte
}

// matches checks that a frame carries a counter for each zone its
// metadata lists, and no other.
func (s *fetched) matches(meta *Meta) error {
	if s.frame == nil {
		return nil
	}
	want := make([]string, 0, len(meta.Zones))
	for _, z := range meta.Zones {
		want = append(want, z.Name)
	}
	slices.Sort(want)
	if got := slices.Sorted(maps.Keys(s.frame)); !slices.Equal(got, want) {
		return fmt.Errorf("%w: counters for %v, metadata lists %v", ErrFrame, got, want)
	}
	return nil
}

// fetch reads the share once: from the stream when Dial is set (one
// frame, decoded), else the directory's metadata file (the zone files are
// read as they are asked for).
func (o *Options) fetch(ctx context.Context) (*fetched, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if o.Dial == nil {
		b, err := os.ReadFile(filepath.Join(o.Dir, MetaFile))
		if err != nil {
			return nil, err
		}
		return &fetched{meta: b,
			counter: func(zone string) ([]byte, error) { return os.ReadFile(filepath.Join(o.Dir, ZoneFile(zone))) },
			where:   func(file string) string { return filepath.Join(o.Dir, file) }}, nil
	}
	c, err := o.Dial(ctx)
	if err != nil {
		return nil, err
	}
	// ctx done closes the connection, which ends a frame that stopped
	// coming; whatever was decoded by then is dropped.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	f, err := DecodeFrame(c)
	if stop() {
		if cerr := c.Close(); err == nil && cerr != nil {
			err = cerr
		}
	} else {
		err = fmt.Errorf("%s: %w", o.Where, ctx.Err())
	}
	if err != nil {
		return nil, err
	}
	where := o.Where
	return &fetched{meta: f.Meta, frame: f.Counters,
		counter: func(zone string) ([]byte, error) {
			if b, ok := f.Counters[zone]; ok {
				return b, nil
			}
			return nil, fmt.Errorf("%w: no counter for zone %s", ErrFrame, zone)
		},
		where: func(file string) string { return where + " " + file }}, nil
}

// peekMeta reads the share's metadata once (Open names the host by it).
func (o *Options) peekMeta(ctx context.Context) (*Meta, error) {
	sh, err := o.fetch(ctx)
	if err != nil {
		return nil, err
	}
	return ParseMeta(sh.meta)
}
