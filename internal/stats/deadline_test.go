package stats

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// hangingMeter is a meter whose reads hang while hang is set: one that
// honours its context returns ctx's error at the deadline, one that does
// not (a file on a hung mount) returns only when released.
type hangingMeter struct {
	honours bool

	mu       sync.Mutex
	joules   float64
	hang     bool
	released chan struct{}
	started  int
}

func newHangingMeter(honours bool) *hangingMeter {
	return &hangingMeter{honours: honours, released: make(chan struct{})}
}

func (m *hangingMeter) Name() string    { return "bmc" }
func (m *hangingMeter) Estimated() bool { return false }

func (m *hangingMeter) Read(ctx context.Context) ([]reading.ZoneSample, error) {
	m.mu.Lock()
	m.started++
	hang, rel := m.hang, m.released
	m.mu.Unlock()
	if hang {
		if m.honours {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-rel:
			}
		} else {
			<-rel
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return []reading.ZoneSample{{Zone: reading.ZonePlatform, Socket: -1, Joules: m.joules}}, nil
}

// Health reports the meter's own view: it never sees the loop give up.
func (m *hangingMeter) Health() []reading.SourceHealth {
	return []reading.SourceHealth{{Source: "bmc", Up: true, Reads: 1, Rejected: map[string]uint64{}}}
}

func (m *hangingMeter) set(f func(m *hangingMeter)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

func (m *hangingMeter) reads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.started
}

func onlyHealth(t *testing.T, s *snapshot.Snapshot, source string) reading.SourceHealth {
	t.Helper()
	var found []reading.SourceHealth
	for _, h := range s.Meters {
		if h.Source == source {
			found = append(found, h)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d health entries for %s in %+v, want 1", len(found), source, s.Meters)
	}
	return found[0]
}

// A meter whose read hangs is cut off at the step's deadline: the step
// returns within it and publishes, the platform zone is not credited, and
// the meter's health counts a late reading with the reason. A meter that
// ignores its context is not read again while its read hangs (the next
// step waits for it up to its own deadline); once it answers, the next
// good read spans the gap, so nothing is lost and nothing is credited
// twice.
func TestHangingMeterCutOffAtTheDeadline(t *testing.T) {
	const timeout = 150 * time.Millisecond
	for _, honours := range []bool{true, false} {
		name := "ignores its context"
		if honours {
			name = "honours its context"
		}
		t.Run(name, func(t *testing.T) {
			m := newHangingMeter(honours)
			src := &fakeSource{}
			l := mustLoop(t, Config{Interval: time.Second, ReadTimeout: timeout, IdlePolicy: "none",
				IdleWatts: map[string]float64{"platform": 0}}, src, m, names{1: "/a"})
			t0 := time.Unix(0, 0)
			src.add(1, 1, 0, 0)
			l.Step(t0)
			src.add(1, 1, 0, 1e9)
			m.set(func(m *hangingMeter) { m.joules = 100 })
			l.Step(t0.Add(time.Second))
			if z := zoneOf(l.Snapshot(), "platform", -1); z.EnergyJ != 100 {
				t.Fatalf("before the hang: platform %v J, want 100", z.EnergyJ)
			}

			m.set(func(m *hangingMeter) { m.hang, m.joules = true, 250 })
			src.add(1, 1, 0, 1e9)
			began := time.Now()
			l.Step(t0.Add(2 * time.Second))
			took := time.Since(began)
			// The deadline, and a margin for a loaded test machine; the
			// hang itself lasts until the test releases it.
			if took < timeout || took > timeout+time.Second {
				t.Errorf("the step with a hanging meter took %v, want the %v deadline", took, timeout)
			}
			s := l.Snapshot()
			if s.Time != t0.Add(2*time.Second) {
				t.Fatalf("the step did not publish: snapshot of %v", s.Time)
			}
			if z := zoneOf(s, "platform", -1); z.EnergyJ != 100 {
				t.Errorf("cut-off read credited: platform %v J, want 100", z.EnergyJ)
			}
			if c := cgroupByPath(s, "/a"); c.CPUSeconds != 2 {
				t.Errorf("the step stopped short of the accounting: /a has %v CPU s, want 2", c.CPUSeconds)
			}
			h := onlyHealth(t, s, "bmc")
			if h.Up || h.Reason != reading.ReasonDeadline || h.Rejected["late"] != 1 || h.Errors != 1 {
				t.Errorf("health after the overrun: %+v, want down, %s, 1 late, 1 error", h, reading.ReasonDeadline)
			}

			src.add(1, 1, 0, 1e9)
			began = time.Now()
			l.Step(t0.Add(3 * time.Second))
			took = time.Since(began)
			if took < timeout || took > timeout+time.Second {
				t.Errorf("the second step with a hanging meter took %v, want the %v deadline", took, timeout)
			}
			wantReads := 4
			if !honours {
				// The hung read still runs: no second one starts.
				wantReads = 3
			}
			if n := m.reads(); n != wantReads {
				t.Errorf("%d reads started, want %d", n, wantReads)
			}
			if h := onlyHealth(t, l.Snapshot(), "bmc"); h.Rejected["late"] != 2 || h.Reason != reading.ReasonDeadline {
				t.Errorf("health after the second overrun: %+v, want 2 late", h)
			}

			m.set(func(m *hangingMeter) { m.hang = false })
			close(m.released)
			if !honours {
				// The abandoned read returns now; the next step drops
				// its figures.
				waitReturned(t, l)
			}
			src.add(1, 1, 0, 1e9)
			m.set(func(m *hangingMeter) { m.joules = 400 })
			l.Step(t0.Add(4 * time.Second))
			s = l.Snapshot()
			if z := zoneOf(s, "platform", -1); z.EnergyJ != 400 {
				t.Errorf("after the meter answers again: platform %v J, want 400 (the gap spanned once)", z.EnergyJ)
			}
			h = onlyHealth(t, s, "bmc")
			if !h.Up || h.Reason != "" || h.Rejected["late"] != 2 {
				t.Errorf("health after a good read: %+v, want up, no reason, 2 late", h)
			}
		})
	}
}

// The step's read timeout: Config.ReadTimeout, at most the interval, half
// of it when unset.
func TestReadTimeout(t *testing.T) {
	for _, tc := range []struct{ set, interval, want time.Duration }{
		{0, 5 * time.Second, 2500 * time.Millisecond},
		{time.Second, 5 * time.Second, time.Second},
		{10 * time.Second, 5 * time.Second, 5 * time.Second},
	} {
		if got := (Config{Interval: tc.interval, ReadTimeout: tc.set}).readTimeout(); got != tc.want {
			t.Errorf("ReadTimeout %v, interval %v: %v, want %v", tc.set, tc.interval, got, tc.want)
		}
	}
}

// waitReturned waits until the meter read the loop cut off has returned.
func waitReturned(t *testing.T, l *Loop) {
	t.Helper()
	var z *zones
	for _, st := range l.stages {
		if zz, ok := st.(*zones); ok {
			z = zz
		}
	}
	for end := time.Now().Add(5 * time.Second); len(z.reads.pending) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatal("the abandoned read did not return once released")
		}
	}
}
