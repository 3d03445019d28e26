package stats

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// scriptedGPUs is a GPU source whose intervals the test writes: the
// devices read in each, in order (the stage's rule for a device missing
// from an interval needs no particular reader).
type scriptedGPUs struct {
	intervals [][]reading.HeldGPUReading
	n         int
}

func (s *scriptedGPUs) Interval(context.Context, time.Time) *reading.GPUInterval {
	iv := &reading.GPUInterval{Devices: s.intervals[s.n]}
	s.n++
	return iv
}

// A device missing from an interval's readings (its source down, or its
// read past the step's deadline) shows no power, no utilization and no
// idle ratio for any of its holders (the board's, the first of them, a
// MIG instance's) until it is read again, and keeps its energy and
// held-idle seconds; a device read in the same interval keeps its
// figures. GPU a: 100 J a 1 s interval at 50 % utilization, held by job 7
// and, in its MIG instance 0.1, by job 8, no process using it; GPU b:
// 60 J, read every interval.
func TestGPUStageUnreadDeviceShowsNoFigures(t *testing.T) {
	a := reading.HeldGPUReading{
		Reading: reading.GPUReading{Device: reading.GPUDevice{Index: 0, UUID: "GPU-a", Source: "nvml"}, OK: true,
			EnergyJ: 100, PowerW: 100, Interval: time.Second, Method: reading.MethodCounter,
			Utilization: 0.5, UtilizationKnown: true,
			Instances: []reading.GPUInstance{{ID: 1, Name: "0.1", SMs: 14, WeightBasis: "sm_share"}}},
		Holders:         []reading.Holder{{Kind: reading.HolderSlurmJob, JobID: "7"}},
		Holder:          reading.Holder{Kind: reading.HolderSlurmJob, JobID: "7"},
		HasHolder:       true,
		InstanceHolders: map[string][]reading.Holder{"0.1": {{Kind: reading.HolderSlurmJob, JobID: "8"}}},
	}
	b := reading.HeldGPUReading{Reading: reading.GPUReading{Device: reading.GPUDevice{Index: 1, UUID: "GPU-b", Source: "nvml"},
		OK: true, EnergyJ: 60, PowerW: 60, Interval: time.Second, Method: reading.MethodCounter, Utilization: 0.25, UtilizationKnown: true}}
	src := &scriptedGPUs{intervals: [][]reading.HeldGPUReading{{a, b}, {a, b}, {b}, {a, b}}}
	fs := &fakeSource{}
	fs.add(1, 100, 0, 0)
	l := mustLoopWith(t, fs, WithGPUs(src, GPUConfig{IdleWatts: map[string]float64{"GPU-a": 20, "GPU-b": 10}}))
	for k := 0; k <= 3; k++ {
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		s := l.Snapshot()
		if len(s.GPUs) != 2 {
			t.Fatalf("interval %d: %d GPUs", k, len(s.GPUs))
		}
		if k == 0 {
			continue // the baseline: no interval, no power yet
		}
		ga, gb := s.GPUs[0], s.GPUs[1]
		if gb.PowerW != 60 || gb.Utilization != 0.25 || !gpuNear(gb.EnergyJ, 60*float64(k)) {
			t.Fatalf("interval %d, GPU b, read every interval: %+v, want 60 W, 0.25, %v J", k, gb, 60*float64(k))
		}
		switch k {
		case 1:
			checkHeldGPURead(t, k, ga, 100, 1)
		case 2:
			checkHeldGPUUnread(t, ga, 100, 1)
		case 3:
			checkHeldGPURead(t, k, ga, 200, 2)
		}
	}
}

// checkHeldGPURead checks GPU a's figures in an interval that read it:
// 100 W at 0.5, energy J, its holders idle (ratio 1) for idleS s.
func checkHeldGPURead(t *testing.T, k int, g snapshot.GPU, energy, idleS float64) {
	t.Helper()
	if g.PowerW != 100 || g.Utilization != 0.5 || !gpuNear(g.EnergyJ, energy) || g.Holder == nil || g.Holder.IdleRatio != 1 ||
		len(g.Holders) != 1 || g.Holders[0].IdleRatio != 1 || g.Holders[0].IdleSeconds != idleS ||
		len(g.InstanceHolders) != 1 || g.InstanceHolders[0].IdleRatio != 1 || g.InstanceHolders[0].IdleSeconds != idleS {
		t.Fatalf("interval %d, GPU a read: %+v (holders %+v, instance holders %+v), want 100 W, 0.5, %v J, idle ratios 1, %v idle s",
			k, g, g.Holders, g.InstanceHolders, energy, idleS)
	}
}

// checkHeldGPUUnread checks GPU a's figures in an interval that did not
// read it: NaN power, utilization and idle ratios, its energy and idle
// seconds as they were.
func checkHeldGPUUnread(t *testing.T, g snapshot.GPU, energy, idleS float64) {
	t.Helper()
	if !math.IsNaN(g.PowerW) || !math.IsNaN(g.Utilization) || !gpuNear(g.EnergyJ, energy) ||
		g.Holder == nil || !math.IsNaN(g.Holder.IdleRatio) ||
		len(g.Holders) != 1 || !math.IsNaN(g.Holders[0].IdleRatio) || g.Holders[0].IdleSeconds != idleS ||
		len(g.InstanceHolders) != 1 || !math.IsNaN(g.InstanceHolders[0].IdleRatio) || g.InstanceHolders[0].IdleSeconds != idleS {
		t.Fatalf("GPU a not read: %+v (holders %+v, instance holders %+v), want NaN power, utilization and idle ratios, %v J, %v idle s",
			g, g.Holders, g.InstanceHolders, energy, idleS)
	}
}
