package stats

import (
	"math"

	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
)

// gpuOptions says who else than processes is credited with a device's energy.
type gpuOptions struct {
	// IdleToHolder credits the idle energy to the device's allocation
	// holder (Slurm job, pod, VM) as HolderJ: the idle-attribution policy
	// "holder". Without it idle stays at device level only ("none").
	IdleToHolder bool
	// Whole credits all of the device's energy to its holder: a GPU passed
	// through to a VM, on which the host sees no processes.
	Whole bool
}

// gpuResult is one device's split for one interval. It always conserves:
// IdleJ + Σ Processes + UnattributedJ = EnergyJ (within a few ulps), where
// UnattributedJ is the dynamic energy no process used (no process had a
// positive weight, or a MIG instance was active without any). HolderJ is
// a view of the same joules (idle, or everything under Whole), not extra.
type gpuResult struct {
	Device                                  reading.GPUDevice
	EnergyJ, IdleJ, DynamicJ, UnattributedJ float64
	// Clamped: the idle model asked for more than the device used.
	Clamped bool
	// Processes is pid → dynamic joules.
	Processes map[int]float64
	// Instances is MIG instance name → dynamic joules (before the split
	// among its processes).
	Instances map[string]float64
	HolderJ   float64
	Basis     reading.GPUBasis
}

// Reset empties r for reuse, keeping its maps.
func (r *gpuResult) Reset() {
	p, i := r.Processes, r.Instances
	clear(p)
	clear(i)
	*r = gpuResult{Processes: p, Instances: i}
	if r.Processes == nil {
		r.Processes = map[int]float64{}
	}
	if r.Instances == nil {
		r.Instances = map[string]float64{}
	}
}

// splitGPU divides one device's energy for one interval into idle (from the
// device's idle model) and dynamic, and the dynamic among the processes by
// their weights: directly, or under MIG first among instances by activity
// and then among each instance's processes. It is a pure function of its
// arguments apart from the idle model's learning and out, which it resets
// and fills. A reading that is not OK splits nothing (all zero).
func splitGPU(r reading.GPUReading, idle model.IdleModel, opt gpuOptions, out *gpuResult) {
	out.Reset()
	out.Device, out.Basis = r.Device, r.Basis
	if !r.OK {
		return
	}
	var idleJ float64
	if idle != nil {
		// NaN fails every comparison of the learned model: an interval
		// whose utilization is unknown (MIG, ROCm) is not taken for idle.
		u := math.NaN()
		if r.UtilizationKnown {
			u = r.Utilization
		}
		idleJ = idle.IdleJ(r.Interval, r.EnergyJ, u)
	}
	if len(r.Instances) == 0 {
		res := model.Split(model.Interval[int]{EnergyJ: r.EnergyJ, IdleJ: idleJ, Usage: r.Usage}, out.Processes, nil)
		out.fill(res)
	} else {
		w := make(map[string]float64, len(r.Instances))
		for _, in := range r.Instances {
			w[in.Name] = in.Weight
		}
		res := model.Split(model.Interval[string]{EnergyJ: r.EnergyJ, IdleJ: idleJ, Usage: w}, out.Instances, nil)
		out.fill(res)
		for _, in := range r.Instances {
			// The instances' basis is the board's whether or not any
			// is active this interval: a label that flipped to "" in
			// quiet intervals would churn series.
			if out.Basis == reading.BasisNone {
				out.Basis = in.Basis
			}
			if e := out.Instances[in.Name]; e > 0 {
				sub := model.Split(model.Interval[int]{EnergyJ: e, Usage: in.Usage}, out.Processes, nil)
				out.UnattributedJ += sub.UnattributedJ
			}
		}
	}
	switch {
	case opt.Whole:
		out.HolderJ = out.EnergyJ
	case opt.IdleToHolder:
		out.HolderJ = out.IdleJ
	}
}

func (r *gpuResult) fill(m model.Result) {
	r.IdleJ, r.DynamicJ, r.UnattributedJ, r.Clamped = m.IdleJ, m.DynamicJ, m.UnattributedJ, m.Clamped
	r.EnergyJ = m.IdleJ + m.DynamicJ
}
