package stats

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
)

func gpuNear(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

func sumPIDs(m map[int]float64) float64 {
	var s float64
	for _, v := range m {
		s += v
	}
	return s
}

// Property: whatever the weights (many processes, MIG or not, weights over
// many orders of magnitude, zeros), idle + Σ processes + unattributed =
// energy to 1e-9 relative, nothing is negative, and unattributed is 0 when
// any process had a positive weight (non-MIG).
func TestSplitConserves(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	var res gpuResult
	for n := 0; n < 3000; n++ {
		rd := reading.GPUReading{OK: true, EnergyJ: r.Float64() * 1000, Interval: time.Second, Basis: reading.BasisSMUtil}
		mk := func() map[int]float64 {
			u := map[int]float64{}
			for i := 0; i < r.IntN(120); i++ {
				u[r.IntN(100000)] = math.Pow(10, r.Float64()*12-6) * float64(r.IntN(2))
			}
			return u
		}
		if r.IntN(3) == 0 {
			for i := 0; i < 1+r.IntN(7); i++ {
				rd.Instances = append(rd.Instances, reading.GPUInstance{Name: string(rune('a' + i)), Weight: float64(r.IntN(5) * 14), Usage: mk()})
			}
		} else {
			rd.Usage = mk()
		}
		splitGPU(rd, &model.ConfiguredIdle{Watts: r.Float64() * 600}, gpuOptions{}, &res)
		for _, v := range res.Processes {
			if !(v > 0) {
				t.Fatalf("non-positive share %v", v)
			}
		}
		if got := res.IdleJ + sumPIDs(res.Processes) + res.UnattributedJ; !gpuNear(got, rd.EnergyJ) && rd.EnergyJ > 0 {
			t.Fatalf("case %d: %v != %v", n, got, rd.EnergyJ)
		}
		if rd.Instances == nil && len(res.Processes) > 0 && res.UnattributedJ != 0 {
			t.Fatalf("unattributed %v with processes", res.UnattributedJ)
		}
	}
}

// The learned idle model sees the device's utilization; a passed-through
// device is wholly its holder's; idle goes to the holder under "holder";
// a reading that is not OK credits nothing.
func TestSplitIdleAndHolder(t *testing.T) {
	learn := model.NewLearnedIdle(0)
	var res gpuResult
	splitGPU(reading.GPUReading{OK: true, EnergyJ: 60, Interval: time.Second, Utilization: 0, UtilizationKnown: true}, learn, gpuOptions{}, &res)
	splitGPU(reading.GPUReading{OK: true, EnergyJ: 300, Interval: time.Second, Utilization: 0.9, UtilizationKnown: true, Usage: map[int]float64{1: 1}}, learn, gpuOptions{}, &res)
	if !gpuNear(res.IdleJ, 60) || !gpuNear(res.Processes[1], 240) {
		t.Fatalf("learned idle: %+v", res)
	}
	splitGPU(reading.GPUReading{OK: true, EnergyJ: 300, Interval: time.Second}, learn, gpuOptions{Whole: true}, &res)
	if res.HolderJ != 300 || len(res.Processes) != 0 {
		t.Fatalf("whole: %+v", res)
	}
	splitGPU(reading.GPUReading{OK: true, EnergyJ: 300, Interval: time.Second}, learn, gpuOptions{IdleToHolder: true}, &res)
	if !gpuNear(res.HolderJ, 60) || !gpuNear(res.UnattributedJ, 240) {
		t.Fatalf("holder: %+v", res)
	}
	splitGPU(reading.GPUReading{OK: false, EnergyJ: 300, Usage: map[int]float64{1: 1}}, learn, gpuOptions{}, &res)
	if res.EnergyJ != 0 || len(res.Processes) != 0 {
		t.Fatalf("not OK credited: %+v", res)
	}
}
