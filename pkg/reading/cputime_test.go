package reading

import (
	"testing"
	"time"
)

// The CPU-time check both accounting sources use: 2 CPUs, so a counter may
// grow 2 s per second (plus CPUTimeSlack's 0.1 s).
func TestCPUTimeBoundsAndRejects(t *testing.T) {
	what := func() string { return "cgroup 7 CPU ns" }
	for _, restarts := range []bool{false, true} {
		k := CPUTime{MaxRate: 2e9, Restarts: restarts, Rejects: NewRejects("bpf", nil)}

		// A key of unknown age: the first reading is the baseline.
		c := k.Counter(time.Time{})
		if d, ok := k.Observe(&c, 50e9, at(0), time.Time{}, what); d != 0 || !ok {
			t.Fatalf("restarts=%v baseline: %d %v, want 0 true", restarts, d, ok)
		}
		if d, ok := k.Observe(&c, 50e9+2e9, at(1), at(0), what); d != 2e9 || !ok {
			t.Errorf("restarts=%v: 2 CPUs busy 1 s credited %d %v, want 2e9", restarts, d, ok)
		}
		if d, ok := k.Observe(&c, 52e9+3e9, at(2), at(1), what); d != 0 || ok {
			t.Errorf("restarts=%v: 3 s in 1 s on 2 CPUs credited %d %v", restarts, d, ok)
		}
		// Nothing lost across the glitch: 4 s in the 2 s since the last good.
		if d, ok := k.Observe(&c, 52e9+4e9, at(3), at(2), what); d != 4e9 || !ok {
			t.Errorf("restarts=%v after the glitch: %d %v, want 4e9", restarts, d, ok)
		}

		// A key that was zero at the previous read (or at boot): its first
		// value is held to every CPU busy since, and credited whole.
		n := k.Counter(at(3))
		if d, ok := k.Observe(&n, 1.5e9, at(4), at(3), what); d != 1.5e9 || !ok {
			t.Errorf("restarts=%v new key: %d %v, want 1.5e9", restarts, d, ok)
		}
		g := k.Counter(at(3))
		if d, ok := k.Observe(&g, 9e9, at(4), at(3), what); d != 0 || ok {
			t.Errorf("restarts=%v new key beyond 2 CPUs: %d %v", restarts, d, ok)
		}

		// A step back to a small value: a fresh count where the source
		// restarts keys, a glitch where it cannot.
		d, ok := k.Observe(&c, 1e9, at(4), at(3), what)
		if restarts && (d != 1e9 || !ok) {
			t.Errorf("restart: %d %v, want the new count 1e9 credited", d, ok)
		}
		if !restarts && (d != 0 || ok) {
			t.Errorf("no restarts: step back credited %d %v", d, ok)
		}

		want := map[string]uint64{"too_fast": 2}
		if !restarts {
			want["backwards"] = 1
		}
		got := k.Rejects.Counts()
		if len(got) != len(want) || got["too_fast"] != want["too_fast"] || got["backwards"] != want["backwards"] {
			t.Errorf("restarts=%v rejections %v, want %v", restarts, got, want)
		}
	}
}
