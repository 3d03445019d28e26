package stats

import (
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/reading"
)

// The split's two hooks, where a GPU stage and an emissions stage plug in:
// a usage override splits one zone by something other than CPU time, and
// every share credited is reported.
func TestSplitHooks(t *testing.T) {
	src := &fakeSource{}
	src.add(1, 100, 0, 0)
	src.add(2, 200, 0, 0)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}, {Zone: "gpu", Socket: 0}}}
	l := mustLoop(t, Config{IdleWatts: map[string]float64{"package": 0, "gpu": 0}, CPUs: 2}, src, m, names{1: "/a", 2: "/b"})
	// "GPU time": all of cgroup /b's, none of /a's, though /a used 3x the CPU.
	sp, led := stageOf[*zones](l).div, stageOf[*ledger](l)
	sp.usageBy = append(sp.usageBy, func(z *zoneState, cg bool) map[*consumer]float64 {
		if z.Name != "gpu" {
			return nil
		}
		out := map[*consumer]float64{}
		if cg {
			out[led.byPath["/b"]] = 1
		} else {
			for _, w := range led.procs {
				if w.w.PID == 200 {
					out[w] = 1
				}
			}
		}
		return out
	})
	credited := map[string]float64{}
	l.credits.consumers = append(l.credits.consumers, func(w *consumer, zone string, dyn, idle float64) {
		if w.w.PID == 0 { // cgroups only; processes are the other hierarchy
			credited[w.w.Cgroup+" "+zone] += dyn + idle
		}
	})
	t0 := time.Unix(1000, 0)
	l.Step(t0)
	src.add(1, 100, 0, 3e9)
	src.add(2, 200, 0, 1e9)
	m.samples[0].Joules, m.samples[1].Joules = 40, 100
	l.Step(t0.Add(2 * time.Second))

	s := l.Snapshot()
	a, b := cgroupByPath(s, "/a"), cgroupByPath(s, "/b")
	if a.Energy.Get("package").DynamicJ != 30 || b.Energy.Get("package").DynamicJ != 10 {
		t.Errorf("package by CPU time: a %v b %v, want 30 and 10", a.Energy.Get("package"), b.Energy.Get("package"))
	}
	if a.Energy.Get("gpu").DynamicJ != 0 || b.Energy.Get("gpu").DynamicJ != 100 {
		t.Errorf("gpu by the override: a %v b %v, want 0 and 100", a.Energy.Get("gpu"), b.Energy.Get("gpu"))
	}
	for k, want := range map[string]float64{"/a package": 30, "/b package": 10, "/b gpu": 100} {
		if math.Abs(credited[k]-want) > 1e-9 {
			t.Errorf("credited %s %v J, want %v", k, credited[k], want)
		}
	}
}

// stageOf is the loop's stage of type T (its zero value when off).
func stageOf[T stage](l *Loop) T {
	for _, s := range l.stages {
		if t, ok := s.(T); ok {
			return t
		}
	}
	var zero T
	return zero
}
