package power

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/wattrace/wattrace/pkg/reading"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*math.Max(1, math.Abs(b)) }

// scripted is a PowerReader returning queued results.
type scripted struct {
	mu    sync.Mutex
	name  string
	queue []scriptedResult
}

type scriptedResult struct {
	r   []Reading
	err error
}

func (s *scripted) Name() string { return s.name }
func (s *scripted) ReadPower(ctx context.Context) ([]Reading, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil, errors.New("empty script")
	}
	r := s.queue[0]
	s.queue = s.queue[1:]
	return r.r, r.err
}

func TestCachedTrapezoidOverDeviceTimes(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	c := newCached(&scripted{name: "bmc"}, time.Second, time.Second, MeterOptions{Now: func() time.Time { return now }}, false)
	if _, err := c.Read(context.Background()); !errors.Is(err, ErrNoReading) {
		t.Fatalf("Read before any reading: %v, want ErrNoReading", err)
	}
	pw := func(w float64, dev time.Time) []Reading {
		return []Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: w, Time: dev}}
	}
	// Host reads at 0, 1.3, 2.1 s; the BMC stamped its samples at 0, 1, 2 s.
	c.fold(pw(100, t0), nil, now)
	now = t0.Add(1300 * time.Millisecond)
	c.fold(pw(200, t0.Add(time.Second)), nil, now)
	now = t0.Add(2100 * time.Millisecond)
	c.fold(pw(300, t0.Add(2*time.Second)), nil, now)
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// (100+200)/2*1 + (200+300)/2*1 = 400 J, timed by the BMC.
	if len(s) != 1 || s[0].Zone != reading.ZonePlatform || s[0].Socket != -1 || !near(s[0].Joules, 400) {
		t.Fatalf("samples %+v, want platform 400 J", s)
	}
	// The same BMC sample again is not new: no energy, and Age grows.
	now = t0.Add(5 * time.Second)
	c.fold(pw(300, t0.Add(2*time.Second)), nil, now)
	if s, _ := c.Read(context.Background()); !near(s[0].Joules, 400) {
		t.Fatalf("duplicate sample added energy: %v J", s[0].Joules)
	}
	if age := c.Age(); age != 5*time.Second-2100*time.Millisecond {
		t.Fatalf("Age = %v, want 2.9s", age)
	}
	// The next new sample spans the gap: (300+100)/2*4 s = 800 J.
	now = t0.Add(6 * time.Second)
	c.fold(pw(100, t0.Add(6*time.Second)), nil, now)
	if s, _ := c.Read(context.Background()); !near(s[0].Joules, 1200) {
		t.Fatalf("after gap: %v J, want 1200", s[0].Joules)
	}
}

func TestCachedHostTimesAndFailures(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	c := newCached(&scripted{name: "ipmi"}, time.Second, time.Second, MeterOptions{Now: func() time.Time { return now }}, false)
	pw := func(w float64) []Reading { return []Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: w}} }
	c.fold(pw(250), nil, now)
	now = now.Add(2 * time.Second)
	c.fold(pw(350), nil, now) // (250+350)/2*2 = 600 J over host times
	now = now.Add(10 * time.Second)
	c.fold(nil, errors.New("BMC busy"), now)
	s, err := c.Read(context.Background())
	if err != nil || !near(s[0].Joules, 600) {
		t.Fatalf("after failure: %+v, %v; want last good 600 J", s, err)
	}
	if c.Age() != 10*time.Second {
		t.Fatalf("Age = %v, want 10s", c.Age())
	}
	if err := c.LastError(); err == nil || !strings.Contains(err.Error(), "ipmi: BMC busy") {
		t.Fatalf("LastError = %v", err)
	}
	if total, failed := c.Reads(); total != 3 || failed != 1 {
		t.Fatalf("Reads = %d, %d", total, failed)
	}
}

func TestCachedEnergyCounterWithReset(t *testing.T) {
	t0 := time.Now()
	now := t0
	c := newCached(&scripted{name: "redfish"}, time.Second, time.Second, MeterOptions{Now: func() time.Time { return now }}, false)
	e := func(j float64) []Reading {
		return []Reading{{Zone: reading.ZonePlatform, Socket: -1, Energy: true, Joules: j}}
	}
	for _, j := range []float64{1e6, 1e6 + 500, 1e6 + 900, 40 /* BMC reboot */, 140} {
		now = now.Add(time.Second)
		c.fold(e(j), nil, now)
	}
	s, _ := c.Read(context.Background())
	if !near(s[0].Joules, 1000) { // 500 + 400 + 0 (reset) + 100
		t.Fatalf("got %v J, want 1000", s[0].Joules)
	}
}

// blocking never answers until its context ends.
type blocking struct{ calls chan struct{} }

func (b *blocking) Name() string { return "slow" }
func (b *blocking) ReadPower(ctx context.Context) ([]Reading, error) {
	b.calls <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestCachedReadNeverBlocks(t *testing.T) {
	b := &blocking{calls: make(chan struct{}, 100)}
	c := NewCached(b, 20*time.Millisecond, 10*time.Millisecond)
	defer c.Close()
	<-b.calls
	start := time.Now()
	_, err := c.Read(context.Background())
	if time.Since(start) > 50*time.Millisecond {
		t.Fatalf("Read blocked %v", time.Since(start))
	}
	if !errors.Is(err, ErrNoReading) {
		t.Fatalf("err = %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.WaitFirst(ctx); err == nil || !strings.Contains(err.Error(), "slow") {
		t.Fatalf("WaitFirst = %v, want the timeout error", err)
	}
}

// lateReader answers after its delay: honouring its context (a Redfish
// request) or not (a library call), with a platform power either way.
type lateReader struct {
	delay   time.Duration
	honours bool
}

func (r lateReader) Name() string { return "bmc" }
func (r lateReader) ReadPower(ctx context.Context) ([]Reading, error) {
	select {
	case <-time.After(r.delay):
	case <-ctx.Done():
		if r.honours {
			return nil, fmt.Errorf("GET /redfish/v1/Chassis/1/Power: %w", ctx.Err())
		}
		time.Sleep(r.delay)
	}
	return []Reading{{Zone: reading.ZonePlatform, Socket: -1, Watts: 300}}, nil
}

// A slow meter's read that overruns power.meter-timeout is never folded
// in, even when the reader returns figures after its deadline, and is
// counted as a late rejected reading with the health reason.
func TestCachedLateReadNotCredited(t *testing.T) {
	for _, honours := range []bool{true, false} {
		c := newCached(lateReader{delay: 50 * time.Millisecond, honours: honours}, time.Second, 10*time.Millisecond, MeterOptions{}, false)
		c.poll(context.Background())
		if _, err := c.Read(context.Background()); !errors.Is(err, ErrNoReading) {
			t.Errorf("honours %v: a late read was folded in: Read err %v", honours, err)
		}
		h := c.SourceHealth()
		if h.Up || h.Errors != 1 || h.Rejected[string(reading.Late)] != 1 || h.Reason != reading.ReasonDeadline {
			t.Errorf("honours %v: health %+v, want down, 1 error, 1 late, reason %s", honours, h, reading.ReasonDeadline)
		}
	}
}

type fixedMeter struct {
	name    string
	samples []reading.ZoneSample
	err     error
}

func (f *fixedMeter) Name() string                                         { return f.name }
func (f *fixedMeter) Estimated() bool                                      { return false }
func (f *fixedMeter) Read(_ context.Context) ([]reading.ZoneSample, error) { return f.samples, f.err }

func TestCombineFirstMeterWinsAndTagsSource(t *testing.T) {
	rapl := &fixedMeter{name: "rapl", samples: []reading.ZoneSample{{Zone: reading.ZonePackage, Socket: 0, Joules: 10}, {Zone: reading.ZonePackage, Socket: 1, Joules: 11}, {Zone: reading.ZoneDRAM, Socket: 0, Joules: 2}}}
	pm := &fixedMeter{name: "pm_counters", samples: []reading.ZoneSample{{Zone: reading.ZonePlatform, Socket: -1, Joules: 50}, {Zone: reading.ZonePackage, Socket: -1, Joules: 21}, {Zone: reading.ZoneGPU, Socket: 0, Joules: 9}}}
	c := Combine(rapl, pm)
	if c.Name() != "rapl+pm_counters" {
		t.Fatalf("Name = %q", c.Name())
	}
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []reading.ZoneSample{
		{Zone: reading.ZonePackage, Socket: 0, Joules: 10, Source: "rapl"}, {Zone: reading.ZonePackage, Socket: 1, Joules: 11, Source: "rapl"}, {Zone: reading.ZoneDRAM, Socket: 0, Joules: 2, Source: "rapl"},
		{Zone: reading.ZonePlatform, Socket: -1, Joules: 50, Source: "pm_counters"}, {Zone: reading.ZoneGPU, Socket: 0, Joules: 9, Source: "pm_counters"},
	}
	if len(s) != len(want) {
		t.Fatalf("got %+v", s)
	}
	for i := range want {
		if s[i] != want[i] {
			t.Fatalf("sample %d = %+v, want %+v", i, s[i], want[i])
		}
	}
	// RAPL failing leaves the platform readable, and ownership stays:
	// pm_counters' package never replaces RAPL's.
	rapl.err = errors.New("EACCES")
	s, err = c.Read(context.Background())
	if err != nil || len(s) != 2 || s[0].Zone != reading.ZonePlatform || s[1].Zone != reading.ZoneGPU {
		t.Fatalf("partial: %+v, %v", s, err)
	}
	if errs := c.LastErrors(); errs[0] == nil || errs[1] != nil {
		t.Fatalf("LastErrors = %v", errs)
	}
	pm.err = errors.New("gone")
	if _, err := c.Read(context.Background()); err == nil {
		t.Fatal("all meters failing must fail Read")
	}
}

func TestPMCounters(t *testing.T) {
	root := copyFixture(t, "pm-counters")
	dir := filepath.Join(root, "cray", "pm_counters")
	p, err := newPMCounters(root, os.ReadFile, MeterOptions{Now: newTick().now})
	if err != nil {
		t.Fatal(err)
	}
	s, err := p.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	zones := []struct {
		zone   string
		socket int
	}{{reading.ZonePlatform, -1}, {reading.ZonePackage, -1}, {reading.ZoneDRAM, -1}, {reading.ZoneGPU, 0}, {reading.ZoneGPU, 1}}
	if len(s) != len(zones) {
		t.Fatalf("samples %+v", s)
	}
	for i, z := range zones {
		if s[i].Zone != z.zone || s[i].Socket != z.socket || s[i].Joules != 0 {
			t.Fatalf("sample %d = %+v, want %v 0 J", i, s[i], z)
		}
	}
	writeFile(t, filepath.Join(dir, "energy"), "4273348 J\n")
	writeFile(t, filepath.Join(dir, "accel1_energy"), "900373 J\n")
	writeFile(t, filepath.Join(dir, "freshness"), "1215340\n")
	s, err = p.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s[0].Joules != 2000 || s[4].Joules != 500 || s[1].Joules != 0 {
		t.Fatalf("after update: %+v", s)
	}
	// Controller restart: startup changes and counters drop; nothing is
	// counted, then counting resumes from the new base.
	writeFile(t, filepath.Join(dir, "startup"), "1700000999000000\n")
	writeFile(t, filepath.Join(dir, "energy"), "100 J\n")
	if s, _ = p.Read(context.Background()); s[0].Joules != 2000 {
		t.Fatalf("after restart: %v J, want 2000", s[0].Joules)
	}
	writeFile(t, filepath.Join(dir, "energy"), "400 J\n")
	if s, _ = p.Read(context.Background()); s[0].Joules != 2300 {
		t.Fatalf("after restart+300: %v J, want 2300", s[0].Joules)
	}
	writeFile(t, filepath.Join(dir, "energy"), "400 W\n")
	if _, err := p.Read(context.Background()); err == nil || !strings.Contains(err.Error(), `want unit "J"`) {
		t.Fatalf("wrong unit: %v", err)
	}
}

func TestPMCountersRetriesWhenFreshnessMoves(t *testing.T) {
	root := copyFixture(t, "pm-counters")
	n := 0
	p, err := newPMCounters(root, func(path string) ([]byte, error) {
		if filepath.Base(path) == "freshness" {
			n++
			if n <= 2 { // 1st scan: before=1, after=2 → retry
				return []byte{byte('0' + n)}, nil
			}
			return []byte("9"), nil
		}
		return os.ReadFile(path)
	}, MeterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(context.Background()); err != nil || n != 4 {
		t.Fatalf("Read = %v after %d freshness reads, want a retry (4 reads)", err, n)
	}
}

func TestHwmon(t *testing.T) {
	root := copyFixture(t, "hwmon")
	h, err := NewHwmon(root, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := h.ReadPower(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := []Reading{
		{Zone: reading.ZonePlatform, Socket: -1, Watts: 245},
		{Zone: reading.ZoneGPU, Socket: 0, Watts: 35},
		{Zone: reading.ZoneGPU, Socket: 1, Energy: true, Joules: 123.456789},
	}
	if len(r) != len(want) {
		t.Fatalf("readings %+v", r)
	}
	for i := range want {
		if r[i].Zone != want[i].Zone || r[i].Socket != want[i].Socket || r[i].Energy != want[i].Energy ||
			!near(r[i].Watts, want[i].Watts) || !near(r[i].Joules, want[i].Joules) {
			t.Fatalf("reading %d = %+v, want %+v", i, r[i], want[i])
		}
	}
	if _, err := NewHwmon(root, HwmonZones{"coretemp": reading.ZonePlatform}); err == nil {
		t.Fatal("a chip without power sensors must not be a meter")
	}
	writeFile(t, filepath.Join(root, "class", "hwmon", "hwmon0", "power1_average"), "-5\n")
	if _, err := h.ReadPower(context.Background()); err == nil || !strings.Contains(err.Error(), "power1_average") {
		t.Fatalf("negative value: %v", err)
	}
}

type fakePerf struct{ v *uint64 }

func (f fakePerf) Count() (uint64, error) { return *f.v, nil }
func (f fakePerf) Close() error           { return nil }

func TestPerfRAPL(t *testing.T) {
	events, cpus, err := ParsePerfPMU("testdata/perf-rapl")
	if err != nil {
		t.Fatal(err)
	}
	if len(cpus) != 2 || cpus[1] != 28 || len(events) != 4 {
		t.Fatalf("cpus %v events %+v", cpus, events)
	}
	if e := events[1]; e.Name != "energy-pkg" || e.Type != 23 || e.Config != 2 || e.Scale != 2.3283064365386962890625e-10 || e.Unit != "Joules" {
		t.Fatalf("energy-pkg = %+v", e)
	}
	counts := map[string]*uint64{}
	p, err := newPerfRAPL("testdata/perf-rapl", func(ev PerfEvent, cpu int) (PerfCounter, error) {
		v := new(uint64)
		*v = math.MaxUint64 - 1<<32 // near the top: the difference must still be right
		counts[ev.Name+"/"+string(rune('0'+cpu%10))] = v
		return fakePerf{v}, nil
	}, MeterOptions{Now: newTick().now})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Read(context.Background()); err != nil {
		t.Fatal(err)
	}
	*counts["energy-pkg/0"] += 1 << 32   // 1 J at 2^-32 J/count
	*counts["energy-pkg/8"] += 10 << 32  // socket 1 (CPU 28)
	*counts["energy-ram/0"] += 65536 * 3 // 3 J at 2^-16
	*counts["energy-psys/0"] += 5 << 32  // crosses 2^64: 5 J by the modular difference
	s, err := p.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, x := range s {
		got[x.Zone+"/"+string(rune('0'+x.Socket+1))] = x.Joules
	}
	if got["package/1"] != 1 || got["package/2"] != 10 || got["dram/1"] != 3 || got["core/1"] != 0 {
		t.Fatalf("joules %v", got)
	}
	if got["psys/0"] != 5 {
		t.Fatalf("psys %v", got["psys/0"])
	}
}

func FuzzParsePMValue(f *testing.F) {
	for _, s := range []string{"123456 J", "250 W", "0 J\n", "J", "-1 J", "18446744073709551616 J", "1  J"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if v, err := ParsePMValue(s, "J"); err == nil && strings.TrimSpace(s) == "" {
			t.Fatalf("empty input parsed as %d", v)
		}
	})
}

// FuzzParseHwmonValue: an hwmon value file is read exactly as strconv
// reads a base-10 uint64 after trimming blanks, the reference parser the
// allocation-free one replaces (FuzzParseUint checks the round trip; this
// checks agreement, rejections and overflow included).
func FuzzParseHwmonValue(f *testing.F) {
	for _, s := range []string{"245000000\n", "-5", "", "1e6", "18446744073709551615", "18446744073709551616", "+7", "0x10", " 12 \n", "1_000"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := ParseHwmonValue(b)
		want, werr := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
		if werr != nil {
			want = 0 // strconv gives the maximum on overflow; ours gives 0 with any error
		}
		if (err == nil) != (werr == nil) || v != want {
			t.Fatalf("ParseHwmonValue(%q) = %d, %v; strconv gives %d, %v", b, v, err, want, werr)
		}
	})
}

func FuzzParsePerfEvent(f *testing.F) {
	for _, s := range []string{"event=0x02", "event=0x02,umask=0x1", "event=2", "event=0x", "2.3283064365386962890625e-10", "0,28-29", "3-1"} {
		f.Add(s)
	}
	f.Add("umask=0x1, event = 0x10")
	f.Fuzz(func(t *testing.T, s string) {
		// What the config parser accepts it also reads back from the
		// kernel's own rendering of that value, wherever the term stands
		// among others: the event code is the hex after event=, no more.
		if v, err := ParsePerfEventConfig(s); err == nil {
			for _, r := range []string{fmt.Sprintf("event=%#x", v), fmt.Sprintf("umask=0x3,event=%#x,any=0x1", v)} {
				if again, err := ParsePerfEventConfig(r); err != nil || again != v {
					t.Fatalf("ParsePerfEventConfig(%q) = %#x, but %q gives %#x, %v", s, v, r, again, err)
				}
			}
		}
		if v, err := ParsePerfScale(s); err == nil && !(v > 0 && v <= 1) {
			t.Fatalf("scale %v accepted", v)
		}
		if cpus, err := ParseCPUList(s); err == nil && len(cpus) == 0 {
			t.Fatal("empty CPU list accepted")
		}
	})
}

// A combined meter forwards Advance and IdleWatts to an estimator member,
// so an estimator standing in for the CPU next to a retried BMC still
// integrates, and reports every member's health.
func TestCombineForwardsToEstimator(t *testing.T) {
	e, err := NewEstimator(LinearZone(reading.ZonePackage, 2, 6))
	if err != nil {
		t.Fatal(err)
	}
	root := copyFixture(t, "rapl-1socket")
	r, err := testRAPL(root)
	if err != nil {
		t.Fatal(err)
	}
	c := Combine(e, r)
	c.Advance(0.5, 10*time.Second) // 2 CPUs × (1 + 2×0.5) W × 10 s = 40 J
	if j := joulesOf(t, mustRead(t, c), reading.ZonePackage, -1); j != 40 {
		t.Fatalf("estimator through Combine: %v J, want 40", j)
	}
	if w, ok := c.IdleWatts(reading.ZonePackage); !ok || w != 2 {
		t.Fatalf("IdleWatts = %v, %v; want 2 W", w, ok)
	}
	if _, ok := c.IdleWatts(reading.ZoneDRAM); ok {
		t.Fatal("IdleWatts for a zone no member models")
	}
	h := c.Health()
	if len(h) != 2 || h[0].Source != "estimator" || h[1].Source != "rapl" || !h[1].Up || h[1].Reads != 1 {
		t.Fatalf("member health %+v", h)
	}
}
