package collector

import (
	"sort"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// NameGPU is the collector of per-GPU series.
const NameGPU = "gpu"

func init() {
	register(Registration{Name: NameGPU, Flag: true, DefaultOn: true,
		Help: "Enable the GPU collector: energy, power and utilization per GPU, per-process GPU energy (top collector.process.top per GPU) and GPU allocations. No series on a node without GPUs.",
		new:  func(o Options) subCollector { return newGPUCollector(settingsOf[ProcessSettings](o, NameProcess).Top) }})
}

// gpuCollector exports each GPU device (snapshot.GPU): its energy by mode
// and power with how they were read, utilization, the processes that used
// it and who it is allocated to. Workload-level GPU energy is the zone
// "gpu" of the existing workload families (summed over a workload's GPUs);
// the per-GPU breakdown of a workload is the per-process series, or the
// allocation series joined in PromQL.
type gpuCollector struct {
	energy, power, util, unattributed, procEnergy, allocation, idle, idleSeconds *desc
	top                                                                          int
}

func newGPUCollector(top int) *gpuCollector {
	dev := []string{"gpu", "uuid", "model", "source", "method"}
	return &gpuCollector{
		top:          top,
		energy:       newDesc("gpu", "energy_joules_total", "Energy the GPU used since the exporter started, split into idle (the GPU's idle model) and dynamic (mode). method: counter (the device's energy counter) or power_integrated (its power reading times the interval; NVIDIA Ampere and newer and amdgpu average power over about 1 s).", append(dev, "mode")...),
		power:        newDesc("gpu", "power_watts", "Mean power of the GPU over the last accounting interval.", dev...),
		util:         newDesc("gpu", "utilization_ratio", "The GPU's busy fraction (0..1) as its source reports it: NVML's share of the driver's last sample period (1/6 s to 1 s) in which a kernel ran, amdgpu's gpu_busy_percent, or for i915/xe the busiest engine class's share of the interval. NaN when the source cannot measure it (a MIG board, amdgpu without gpu_busy_percent, DRM clients unreadable).", "gpu", "uuid", "model"),
		unattributed: newDesc("gpu", "unattributed_joules_total", "Dynamic GPU energy of intervals in which no known process used the GPU, so it could not be split among processes.", dev...),
		procEnergy:   newDesc("gpu", "process_energy_joules_total", "Dynamic GPU energy attributed to the process on that GPU, by its share of the GPU's use (basis: sm_util, memory or engine_time). Only the top collector.process.top processes per GPU.", "pid", "comm", "gpu", "uuid", "basis", "namespace", "pod", "container", "job_id", "vm"),
		allocation:   newDesc("gpu", "allocation_info", "1 for each GPU, or MIG instance (instance, <gpu>.<gi>), allocated to a Slurm job, pod container or VM (kind), to join other GPU exporters' series (dcgm-exporter's UUID) with workloads. passthrough is true for a GPU passed through to a VM.", "gpu", "uuid", "instance", "kind", "job_id", "namespace", "pod", "container", "vm", "passthrough"),
		// The allocation's labels but passthrough: VMs, the only holders
		// passed a GPU through, have no series (the host cannot see the
		// guest's processes).
		idleSeconds: newDesc("gpu", "allocation_idle_seconds_total", "Seconds the holder (kind: slurm or pod) held the GPU or MIG instance with none of its processes using it: wattrace_gpu_allocation_idle_ratio summed over accounting intervals, each idle interval adding its exact length. Starts at 0 when the holder is first seen holding the device. No series for VMs.", "gpu", "uuid", "instance", "kind", "job_id", "namespace", "pod", "container", "vm"),
		idle:        newDesc("gpu", "allocation_idle_ratio", "Fraction (0..1) of the last accounting interval in which the holder (kind: slurm or pod) held the GPU or MIG instance and none of its processes used it (no SM or engine time; a process holding memory without running kernels is idle). 1 or 0 per interval; average it over time. NaN when usage could not be read. No series for VMs, whose processes the host cannot see.", "gpu", "uuid", "instance", "kind", "job_id", "namespace", "pod", "container", "vm"),
	}
}

func (c *gpuCollector) describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, c.energy, c.power, c.util, c.unattributed, c.procEnergy, c.allocation, c.idle, c.idleSeconds)
}

func (c *gpuCollector) update(out *sink, snap *snapshot.Snapshot) error {
	if snap == nil {
		return errNoSnapshot
	}
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		idx := strconv.Itoa(g.Index)
		out.add(c.energy, prometheus.CounterValue, g.IdleJ, idx, g.UUID, g.Model, g.Source, g.Method, modeIdle)
		out.add(c.energy, prometheus.CounterValue, g.DynamicJ, idx, g.UUID, g.Model, g.Source, g.Method, modeDynamic)
		out.add(c.power, prometheus.GaugeValue, g.PowerW, idx, g.UUID, g.Model, g.Source, g.Method)
		out.add(c.unattributed, prometheus.CounterValue, g.UnattributedJ, idx, g.UUID, g.Model, g.Source, g.Method)
		out.add(c.util, prometheus.GaugeValue, g.Utilization, idx, g.UUID, g.Model)
		for _, p := range c.topProcs(g.Processes) {
			out.add(c.procEnergy, prometheus.CounterValue, p.DynamicJ, strconv.FormatUint(uint64(p.PID), 10), p.Comm,
				idx, g.UUID, g.Basis, p.Namespace, p.Pod, p.Container, p.JobID, p.VM)
		}
		for i := range g.Holders {
			c.alloc(out, idx, g.UUID, &g.Holders[i])
		}
		if h := g.Holder; h != nil && len(g.Holders) == 0 {
			c.alloc(out, idx, g.UUID, h)
		}
		for i := range g.InstanceHolders {
			c.alloc(out, idx, g.UUID, &g.InstanceHolders[i])
		}
	}
	return nil
}

func (c *gpuCollector) alloc(out *sink, idx, uuid string, h *snapshot.GPUHolder) {
	out.add(c.allocation, prometheus.GaugeValue, 1, idx, uuid, h.Instance, h.Kind, h.JobID, h.Namespace, h.Pod, h.Container, h.VM,
		strconv.FormatBool(h.Whole))
	if h.IdleObservable {
		out.add(c.idle, prometheus.GaugeValue, h.IdleRatio, idx, uuid, h.Instance, h.Kind, h.JobID, h.Namespace, h.Pod, h.Container, h.VM)
		out.add(c.idleSeconds, prometheus.CounterValue, h.IdleSeconds, idx, uuid, h.Instance, h.Kind, h.JobID, h.Namespace, h.Pod, h.Container, h.VM)
	}
}

// topProcs returns the top N processes by energy (all when N is 0),
// ties broken by PID so the selection is stable between scrapes.
func (c *gpuCollector) topProcs(ps []snapshot.GPUProcess) []snapshot.GPUProcess {
	if c.top <= 0 || len(ps) <= c.top {
		return ps
	}
	out := append([]snapshot.GPUProcess(nil), ps...)
	sort.Slice(out, func(i, j int) bool {
		if out[i].DynamicJ != out[j].DynamicJ {
			return out[i].DynamicJ > out[j].DynamicJ
		}
		return out[i].PID < out[j].PID
	})
	return out[:c.top]
}
