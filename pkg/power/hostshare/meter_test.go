package hostshare

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/reading"
)

// share is a host's share written by the test.
type share struct {
	t    *testing.T
	dir  string
	meta Meta
}

func newShare(t *testing.T, zones ...string) *share {
	t.Helper()
	s := &share{t: t, dir: t.TempDir(), meta: Meta{Version: Version, Host: "hv1", Epoch: "e1",
		Domain: Domain{Name: "web01", UUID: "2a7d9e4b-1c3f-4a5b-8d6e-7f8091a2b3c4"}, IntervalSeconds: 1}}
	for _, z := range zones {
		s.meta.Zones = append(s.meta.Zones, Zone{Name: z, Method: "measured", Source: "rapl", IdlePolicy: "even"})
	}
	return s
}

// set writes one update: the counters in joules, the update time at.
func (s *share) set(at time.Time, joules map[string]float64) {
	s.t.Helper()
	s.meta.Seq++
	s.meta.Updated = at
	if err := Write(s.dir, &s.meta, joules); err != nil {
		s.t.Fatal(err)
	}
}

// raw overwrites one zone file with content, as a broken host might.
func (s *share) raw(zone, content string) {
	s.t.Helper()
	s.meta.Seq++
	if err := os.WriteFile(filepath.Join(s.dir, ZoneFile(zone)), []byte(content), 0o644); err != nil {
		s.t.Fatal(err)
	}
}

type clock struct{ now time.Time }

func (c *clock) Now() time.Time                { return c.now }
func (c *clock) add(d time.Duration)           { c.now = c.now.Add(d) }
func joulesOf(ss []reading.ZoneSample) float64 { return sumJ(ss, "") }

func sumJ(ss []reading.ZoneSample, zone string) float64 {
	var j float64
	for _, s := range ss {
		if zone == "" || s.Zone == zone {
			j += s.Joules
		}
	}
	return j
}

func open(t *testing.T, dir string, c *clock) *Meter {
	t.Helper()
	m, err := Open(Options{Dir: dir, Staleness: 5 * time.Second, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func read(t *testing.T, m interface {
	Read(ctx context.Context) ([]reading.ZoneSample, error)
}) []reading.ZoneSample {
	t.Helper()
	ss, err := m.Read(context.Background())
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return ss
}

// The guest's zones grow by exactly what the host's counters grew, named
// after the host and measured.
func TestMeterPassesHostEnergyThrough(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package", "dram")
	s.set(c.now, map[string]float64{"package": 5000, "dram": 40})
	m := open(t, s.dir, c)
	if m.Name() != "host:hv1" || m.Estimated() {
		t.Fatalf("name %q estimated %v, want host:hv1, measured", m.Name(), m.Estimated())
	}
	if j := joulesOf(read(t, m)); j != 0 {
		t.Fatalf("first read: %v J, want 0 (baseline)", j)
	}
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 5012.5, "dram": 41.25})
	ss := read(t, m)
	if p, d := sumJ(ss, "package"), sumJ(ss, "dram"); p != 12.5 || d != 1.25 {
		t.Fatalf("package %v J dram %v J, want 12.5 and 1.25", p, d)
	}
	for _, x := range ss {
		if x.Source != "host:hv1" || x.Socket != -1 {
			t.Errorf("sample %+v: want source host:hv1, socket -1", x)
		}
	}
	if h := m.Health()[0]; !h.Up || h.Reads != 2 || h.Errors != 0 {
		t.Errorf("health %+v", h)
	}
}

// Garbage, a decreasing counter and an absurd rate are each rejected,
// counted by reason and never credited; the counter goes on from its last
// good value.
func TestMeterRejectsBadFiles(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 100})
	m := open(t, s.dir, c)
	read(t, m)

	steps := []struct {
		name    string
		write   func()
		reason  string
		wantErr bool
	}{
		{"garbage", func() { s.raw("package", "12abc\n") }, "unreadable", true},
		{"nan", func() { s.raw("package", "NaN\n") }, "unreadable", true},
		{"decrease", func() { s.set(c.now, map[string]float64{"package": 50}) }, "backwards", false},
		// 1 GJ in a second: 1 GW, far above any node.
		{"absurd rate", func() { s.set(c.now, map[string]float64{"package": 1e9}) }, "too_fast", false},
	}
	for _, st := range steps {
		c.add(time.Second)
		st.write()
		before := m.Rejected()[st.reason]
		ss, err := m.Read(context.Background())
		if (err != nil) != st.wantErr {
			t.Errorf("%s: Read error %v, want error %v", st.name, err, st.wantErr)
		}
		if got := m.Rejected()[st.reason]; got != before+1 {
			t.Errorf("%s: rejected[%s] = %d, want %d", st.name, st.reason, got, before+1)
		}
		if err == nil && joulesOf(ss) != 0 {
			t.Errorf("%s: credited %v J", st.name, joulesOf(ss))
		}
	}
	// A good value continuing from 100 J: only its own increase counts.
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 130})
	if j := joulesOf(read(t, m)); j != 30 {
		t.Errorf("after the rejections: %v J, want 30 (130 - 100)", j)
	}
	h := m.Health()[0]
	if h.Rejected["unreadable"] != 2 || h.Rejected["backwards"] != 1 || h.Rejected["too_fast"] != 1 {
		t.Errorf("health rejections %v", h.Rejected)
	}
	if h.Errors != 2 {
		t.Errorf("read errors %d, want 2 (the two unparseable files)", h.Errors)
	}
}

// Garbage metadata is a rejected reading and a failed read.
func TestMeterRejectsGarbageMeta(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 1})
	m := open(t, s.dir, c)
	read(t, m)
	for _, bad := range []string{"{not json", `{"version":2,"epoch":"e","zones":[{"name":"package"}],"updated":"2026-01-01T00:00:00Z"}`,
		`{"version":1,"epoch":"e","zones":[{"name":"../etc/passwd"}],"updated":"2026-01-01T00:00:00Z"}`} {
		if err := os.WriteFile(filepath.Join(s.dir, MetaFile), []byte(bad), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Read(context.Background()); err == nil {
			t.Errorf("meta %q: read succeeded", bad)
		}
	}
	if n := m.Rejected()["unreadable"]; n != 3 {
		t.Errorf("unreadable rejections %d, want 3", n)
	}
	if m.Health()[0].Up {
		t.Error("health up after failed reads")
	}
}

// A new epoch (the host restarted its counters from zero, marked) takes a
// fresh baseline: no rejection, nothing credited for the drop.
func TestMeterNewEpochRebaselines(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 500})
	m := open(t, s.dir, c)
	read(t, m)
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 510})
	read(t, m)
	c.add(time.Second)
	s.meta.Epoch, s.meta.Resets = "e2", 1
	s.set(c.now, map[string]float64{"package": 3})
	if j := joulesOf(read(t, m)); j != 10 {
		t.Errorf("at the reset: %v J, want 10", j)
	}
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 7})
	if j := joulesOf(read(t, m)); j != 14 {
		t.Errorf("%v J, want 14 (10 before the reset, 4 after)", j)
	}
	if n := len(m.Rejected()); n != 0 {
		t.Errorf("rejections %v, want none", m.Rejected())
	}
}

// fakeEstimator is a model at a fixed power, advanced by the loop.
type fakeEstimator struct {
	watts, joules float64
}

func (e *fakeEstimator) Name() string                        { return "estimator" }
func (e *fakeEstimator) Estimated() bool                     { return true }
func (e *fakeEstimator) Advance(_ float64, dt time.Duration) { e.joules += e.watts * dt.Seconds() }
func (e *fakeEstimator) Read(_ context.Context) ([]reading.ZoneSample, error) {
	return []reading.ZoneSample{{Zone: reading.ZonePackage, Socket: -1, Joules: e.joules}}, nil
}
func (e *fakeEstimator) Health() []reading.SourceHealth {
	return []reading.SourceHealth{{Source: "estimator", Up: true}}
}

// While the share is fresh the host's figures count; once it is older than
// the staleness (here: removed) the host is reported down and the
// estimator takes over, named in each sample; when the host comes back its
// figures count again, without counting the outage twice.
func TestFallbackOnStaleShare(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 1000})
	est := &fakeEstimator{watts: 7}
	f := NewFallback(open(t, s.dir, c), est, nil)
	step := func(hostJ float64) []reading.ZoneSample {
		c.add(time.Second)
		f.Advance(0.5, time.Second)
		if hostJ > 0 {
			s.set(c.now, map[string]float64{"package": hostJ})
		}
		return read(t, f)
	}
	read(t, f)
	ss := step(1020) // 20 W from the host
	if j, src := sumJ(ss, "package"), ss[0].Source; j != 20 || src != "host:hv1" || f.Falling() {
		t.Fatalf("fresh: %v J from %q (falling %v), want 20 J from host:hv1", j, src, f.Falling())
	}
	// A fresh update that brings nothing new (a quiet VM): still the
	// host's, and the estimate, if it must stand in, starts from here.
	if ss := step(1020); sumJ(ss, "package") != 20 || f.Falling() {
		t.Fatalf("quiet update: %v J (falling %v), want 20 J from the host", sumJ(ss, "package"), f.Falling())
	}
	// The share disappears.
	if err := os.RemoveAll(s.dir); err != nil {
		t.Fatal(err)
	}
	var j float64
	for i := 0; i < 5; i++ { // 5 s: not yet stale
		if ss, err := f.Read(context.Background()); err != nil || sumJ(ss, "package") != 20 || ss[0].Source != "host:hv1" {
			t.Fatalf("failing, not stale: %v %v", ss, err)
		}
		c.add(time.Second)
		f.Advance(0.5, time.Second)
	}
	h := f.Health()
	if h[0].Source != "host:hv1" || h[0].Up {
		t.Errorf("host health %+v: want down", h[0])
	}
	c.add(time.Second)
	f.Advance(0.5, time.Second)
	ss, err := f.Read(context.Background()) // 6 s since the last update: stale
	if err != nil {
		t.Fatal(err)
	}
	j = sumJ(ss, "package")
	// The estimate covers the 6 s since the host's last update: 42 J.
	if ss[0].Source != "estimator" || !f.Falling() || j != 20+42 {
		t.Fatalf("stale: %v J from %q, want 62 J from estimator", j, ss[0].Source)
	}
	// The host comes back (same epoch, counters went on meanwhile).
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ss = step(1200)
	if ss[0].Source != "host:hv1" || f.Falling() || sumJ(ss, "package") != 62 {
		t.Fatalf("back: %v J from %q, want 62 J (rebaselined) from the host", sumJ(ss, "package"), ss[0].Source)
	}
	ss = step(1230)
	if got := sumJ(ss, "package"); math.Abs(got-92) > 1e-9 {
		t.Errorf("after recovery: %v J, want 92", got)
	}
	if h := f.Health(); !h[0].Up {
		t.Errorf("host health %+v: want up again", h[0])
	}
}

// A share is present when its metadata exists, or when its directory is
// a mount point (mounted before the host wrote anything); a plain empty
// directory is not one.
func TestPresent(t *testing.T) {
	dir := t.TempDir()
	if Present(dir) {
		t.Errorf("empty directory %s taken for a share", dir)
	}
	s := newShare(t, "package")
	s.set(time.Unix(1, 0), map[string]float64{"package": 1})
	if !Present(s.dir) {
		t.Errorf("share with metadata not present")
	}
	if !Present("/proc") { // a mount point without metadata
		t.Errorf("mount point /proc not taken for a mounted share")
	}
	if Present(filepath.Join(dir, "missing")) {
		t.Errorf("missing directory taken for a share")
	}
}

func (e *fakeEstimator) Estimates() []reading.Estimate {
	return []reading.Estimate{{ZoneID: reading.ZoneID{Name: reading.ZonePackage, Socket: -1}, Source: "estimator", Watts: e.watts}}
}

// The estimator's bands are exported only while it stands in.
func TestFallbackEstimatesOnlyWhenFalling(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 1})
	f := NewFallback(open(t, s.dir, c), &fakeEstimator{watts: 3}, nil)
	read(t, f)
	if e := f.Estimates(); len(e) != 0 {
		t.Errorf("fresh share: estimates %v, want none", e)
	}
	c.add(time.Minute)
	read(t, f)
	if e := f.Estimates(); len(e) != 1 || e[0].Watts != 3 {
		t.Errorf("stale share: estimates %v, want the estimator's", e)
	}
}

// A live-migrated guest's share is written by its new host under a new
// epoch: the meter names the new host from then on, its samples and its
// health too, and counts on from a fresh baseline.
func TestMeterRenamesOnNewHostEpoch(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	s.set(c.now, map[string]float64{"package": 500})
	m := open(t, s.dir, c)
	read(t, m)
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 510})
	read(t, m)
	c.add(time.Second)
	s.meta.Host, s.meta.Epoch, s.meta.Seq = "hv2", "e-hv2", 0
	s.set(c.now, map[string]float64{"package": 2})
	ss := read(t, m)
	if m.Name() != "host:hv2" || ss[0].Source != "host:hv2" || joulesOf(ss) != 10 {
		t.Fatalf("after migration: name %q samples %+v, want host:hv2 and 10 J", m.Name(), ss)
	}
	c.add(time.Second)
	s.set(c.now, map[string]float64{"package": 6})
	if j := joulesOf(read(t, m)); j != 14 {
		t.Errorf("%v J, want 14 (10 on hv1, 4 on hv2)", j)
	}
	if h := m.Health()[0]; h.Source != "host:hv2" || !h.Up {
		t.Errorf("health %+v, want host:hv2 up", h)
	}
	// The same host under a new epoch keeps its name.
	c.add(time.Second)
	s.meta.Epoch = "e-hv2b"
	s.set(c.now, map[string]float64{"package": 1})
	if ss := read(t, m); m.Name() != "host:hv2" || ss[0].Source != "host:hv2" {
		t.Errorf("same host, new epoch: name %q", m.Name())
	}
}

// A share unreadable at Open is named "host" until its first metadata
// names the host.
func TestMeterNamesHostOnceReadable(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package")
	m := open(t, s.dir, c)
	if m.Name() != "host" {
		t.Fatalf("name %q before any metadata, want host", m.Name())
	}
	s.set(c.now, map[string]float64{"package": 5})
	if ss := read(t, m); m.Name() != "host:hv1" || ss[0].Source != "host:hv1" {
		t.Errorf("name %q samples %+v, want host:hv1", m.Name(), ss)
	}
}

// A host that writes every 20 s is stale only after three of its
// intervals (60 s) without a new update, not after the 5 s setting; a
// fast host after the setting; an absurd interval is ignored.
func TestStalenessFollowsHostInterval(t *testing.T) {
	for _, tc := range []struct {
		every     float64
		fresh     time.Duration // not stale this long after the last update
		stale     time.Duration // stale this long after it
		staleness time.Duration
	}{
		{every: 20, fresh: 59 * time.Second, stale: 61 * time.Second, staleness: time.Minute},
		{every: 1, fresh: 4 * time.Second, stale: 6 * time.Second, staleness: 5 * time.Second},
		{every: 0, fresh: 4 * time.Second, stale: 6 * time.Second, staleness: 5 * time.Second},
		{every: -20, fresh: 4 * time.Second, stale: 6 * time.Second, staleness: 5 * time.Second},
		{every: 1e9, fresh: 4 * time.Second, stale: 6 * time.Second, staleness: 5 * time.Second},
	} {
		c := &clock{now: time.Unix(1000, 0)}
		s := newShare(t, "package")
		s.meta.IntervalSeconds = tc.every
		s.set(c.now, map[string]float64{"package": 1})
		m := open(t, s.dir, c) // setting: 5 s
		read(t, m)
		if got := m.Staleness(); got != tc.staleness {
			t.Errorf("interval %v s: staleness %v, want %v", tc.every, got, tc.staleness)
		}
		c.add(tc.fresh)
		read(t, m)
		if m.Stale() || !m.Health()[0].Up {
			t.Errorf("interval %v s: stale %v after the last update", tc.every, tc.fresh)
		}
		c.add(tc.stale - tc.fresh)
		read(t, m)
		if !m.Stale() || m.Health()[0].Up {
			t.Errorf("interval %v s: not stale %v after the last update", tc.every, tc.stale)
		}
	}
}

// The stand-in follows the host's idle policy: under none the host's
// figures hold the VM's dynamic energy only, and so does the estimate
// that stands in for them; under even it holds idle too.
func TestFallbackFollowsHostIdlePolicy(t *testing.T) {
	for _, tc := range []struct {
		policy string
		wantJ  float64 // credited over the 6 s since the last update
	}{
		{"none", 6 * 10}, // 20 W at half load, 10 W of it idle
		{"even", 6 * 20},
		{"cpu", 6 * 20},
	} {
		c := &clock{now: time.Unix(1000, 0)}
		s := newShare(t, "package")
		s.meta.Zones[0].IdlePolicy = tc.policy
		s.set(c.now, map[string]float64{"package": 1000})
		est, err := power.NewEstimator(power.LinearZone("package", 10, 30))
		if err != nil {
			t.Fatal(err)
		}
		f := NewFallback(open(t, s.dir, c), est, nil)
		read(t, f)
		c.add(time.Second)
		f.Advance(0.5, time.Second)
		s.set(c.now, map[string]float64{"package": 1005})
		read(t, f) // 5 J from the host; the estimate starts here
		for i := 0; i < 6; i++ {
			c.add(time.Second)
			f.Advance(0.5, time.Second)
		}
		ss := read(t, f)
		if !f.Falling() || ss[0].Source != "estimator" || math.Abs(sumJ(ss, "package")-(5+tc.wantJ)) > 1e-9 {
			t.Errorf("policy %s: %v J from %q (falling %v), want %v", tc.policy, sumJ(ss, "package"), ss[0].Source, f.Falling(), 5+tc.wantJ)
		}
	}
}

// Each sample carries its zone's method as the host wrote it, through the
// fallback too; the estimate standing in is estimated.
func TestSamplesCarryZoneMethod(t *testing.T) {
	c := &clock{now: time.Unix(1000, 0)}
	s := newShare(t, "package", "dram")
	s.meta.Zones[1].Method = "estimated"
	s.set(c.now, map[string]float64{"package": 10, "dram": 1})
	m := open(t, s.dir, c)
	f := NewFallback(m, &fakeEstimator{watts: 3}, nil)
	want := map[string]string{"package": "measured", "dram": "estimated"}
	for _, ss := range [][]reading.ZoneSample{read(t, m), read(t, f)} {
		for _, x := range ss {
			if x.Method != want[x.Zone] {
				t.Errorf("%s: method %q, want %q", x.Zone, x.Method, want[x.Zone])
			}
		}
	}
	c.add(10 * time.Second)
	f.Advance(0.5, 10*time.Second)
	for _, x := range read(t, f) {
		if x.Zone == "package" && (x.Method != "estimated" || x.Source != "estimator") {
			t.Errorf("stale: %+v, want the estimator's, estimated", x)
		}
	}
}
