//go:build cgo

package stats

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// staticAllocs is an allocation source that always answers the same.
type staticAllocs []alloc.Allocation

func (staticAllocs) Name() string { return "static" }
func (a staticAllocs) Allocations(context.Context) ([]alloc.Allocation, error) {
	return a, nil
}

// mockNVMLRun is TestGPUStageMockNVML's node: the loop over two mock
// A100s, and the GPU joules its credited hooks heard of, by PID.
type mockNVMLRun struct {
	l      *Loop
	bs     []*gpuBoard
	fs     *fakeSource
	devs   []reading.GPUDevice
	hooked map[uint32]float64
}

// newMockNVMLRun: pids 100/101/102 time-sliced on GPU 0 at SM 60/30/10
// (pid 103 holds a context), pid 200 alone on GPU 1; 100 in a pod's
// container, 101 in another of the pod's, 102 and 103 in Slurm job 42,
// 200 in job 43, which holds GPU 1 under the holder policy. GPU 0's idle
// is 50 W (by UUID), GPU 1's 40 W (by index).
func newMockNVMLRun(t *testing.T) *mockNVMLRun {
	srv, bs := twoMockGPUs(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	allocs := staticAllocs{{Device: alloc.Ref{UUID: devs[1].UUID}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "43"}}}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	paths := names{
		1: podPath + "aaaa000000000000000000000000000000000000000000000000000000000000.scope",
		2: podPath + "bbbb000000000000000000000000000000000000000000000000000000000000.scope",
		3: "/slurm_n1/uid_0/job_42/step_0/task_0",
		4: "/slurm_n1/uid_0/job_43/step_0/task_0",
	}
	fs := &fakeSource{}
	for pid, cg := range map[uint32]uint64{100: 1, 101: 2, 102: 3, 103: 3, 200: 4} {
		fs.add(cg, pid, 0, 0)
	}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, paths, nil,
		WithWorkloads(ids, ident.Levels()),
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{devs[0].UUID: 50, "1": 40}, IdlePolicy: "holder"}))
	if err != nil {
		t.Fatal(err)
	}
	r := &mockNVMLRun{l: l, bs: bs, fs: fs, devs: devs, hooked: map[uint32]float64{}}
	// The split's credited hooks (emissions) hear of every GPU joule given
	// to a process, as for any zone.
	l.credits.consumers = append(l.credits.consumers, func(w *consumer, zone string, dyn, idle float64) {
		if zone == reading.ZoneGPU && w.w.PID != 0 {
			r.hooked[w.w.PID] += dyn + idle
		}
	})
	return r
}

// checkGPUInterval: after interval k each GPU's energy is what the boards
// drew, idle + Σ processes (+ unattributed, which is 0 after the
// baseline) = idle + dynamic = energy to 1e-9, and its zone carries the
// same energy and idle from source "nvml".
func checkGPUInterval(t *testing.T, k int, s *snapshot.Snapshot, energy [2]float64) {
	t.Helper()
	if len(s.GPUs) != 2 {
		t.Fatalf("interval %d: %d GPUs", k, len(s.GPUs))
	}
	for i, d := range s.GPUs {
		var procs float64
		for _, p := range d.Processes {
			procs += p.DynamicJ
		}
		if d.Index != i || !gpuNear(d.EnergyJ, energy[i]) || !gpuNear(d.IdleJ+procs+d.UnattributedJ, d.EnergyJ) ||
			!gpuNear(d.IdleJ+d.DynamicJ, d.EnergyJ) || (k > 0 && d.UnattributedJ != 0) {
			t.Fatalf("interval %d GPU %d: %+v (energy %v, processes %v)", k, i, d, energy[i], procs)
		}
		z := zoneOf(s, reading.ZoneGPU, i)
		if z.EnergyJ != d.EnergyJ || z.IdleJ != d.IdleJ || z.Source != "nvml" {
			t.Fatalf("zone %+v", z)
		}
	}
}

// gpuProcessJ is each process's dynamic GPU energy in s's GPU records.
func gpuProcessJ(s *snapshot.Snapshot) map[uint32]float64 {
	pj := map[uint32]float64{}
	for _, d := range s.GPUs {
		for _, p := range d.Processes {
			pj[p.PID] = p.DynamicJ
		}
	}
	return pj
}

// checkProcesses: the processes' GPU energy splits 6:3:1 on GPU 0
// (none to pid 103, never busy) and is GPU 1's dynamic for pid 200; the
// credited hooks heard each process's joules, and each process's
// consumer carries them in zone "gpu".
func (r *mockNVMLRun) checkProcesses(t *testing.T, s *snapshot.Snapshot, pj map[uint32]float64, energy [2]float64) {
	t.Helper()
	if !gpuNear(pj[100]/pj[102], 6) || !gpuNear(pj[101]/pj[102], 3) || pj[103] != 0 || !gpuNear(pj[200], energy[1]-4000) {
		t.Fatalf("per process %v", pj)
	}
	for pid, j := range pj {
		if !gpuNear(r.hooked[pid], j) {
			t.Errorf("credited hook: pid %d %v, want %v", pid, r.hooked[pid], j)
		}
	}
	for _, c := range s.Processes {
		if got := c.Energy.Get(reading.ZoneGPU).DynamicJ; got != pj[c.PID] {
			t.Errorf("process %d gpu %v want %v", c.PID, got, pj[c.PID])
		}
	}
	for _, p := range s.GPUs[0].Processes {
		if (p.PID == 102) != (p.JobID == "42") {
			t.Errorf("process %+v", p)
		}
	}
}

// checkMockNVMLWorkloads: the pod carries pids 100 and 101's GPU energy,
// job 42 pid 102's, job 43 pid 200's and GPU 1's idle (4000 J, its
// holder's); GPU 0's idle stays at device level (no holder), so the
// cgroups' GPU energy + both GPUs' idle is the GPUs' energy, nothing lost
// and nothing twice.
func checkMockNVMLWorkloads(t *testing.T, s *snapshot.Snapshot, pj map[uint32]float64, energy [2]float64) {
	t.Helper()
	pod, ok := unitBy(s, ident.KindPod, "0b4c2c6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e")
	if !ok || !gpuNear(pod.Energy.Get(reading.ZoneGPU).DynamicJ, pj[100]+pj[101]) {
		t.Errorf("pod %+v", pod)
	}
	j42, _ := unitBy(s, ident.KindJob, "42")
	j43, _ := unitBy(s, ident.KindJob, "43")
	if !gpuNear(j42.Energy.Get(reading.ZoneGPU).DynamicJ, pj[102]) ||
		!gpuNear(j43.Energy.Get(reading.ZoneGPU).DynamicJ, pj[200]) || !gpuNear(j43.Energy.Get(reading.ZoneGPU).IdleJ, 4000) {
		t.Errorf("jobs 42 %+v, 43 %+v", j42.Energy, j43.Energy)
	}
	var cg float64
	for _, c := range s.Cgroups {
		cg += c.Energy.Get(reading.ZoneGPU).DynamicJ
	}
	if !gpuNear(cg+s.GPUs[0].IdleJ+s.GPUs[1].IdleJ, energy[0]+energy[1]) {
		t.Errorf("cgroups %v + idle != %v", cg, energy[0]+energy[1])
	}
}

// NVIDIA GPUs end to end through the stats loop on mock NVML: two A100s,
// pids 100/101/102 time-sliced on GPU 0 at SM 60/30/10 (pid 103 holds a
// context, never sampled busy), pid 200 alone on GPU 1. 100 intervals of
// 300 J and 220 J (+ jitter). GPU 0 idle is configured (50 W by UUID),
// GPU 1's is 40 W by index; GPU 1 is held by Slurm job 43 under the
// holder policy. Every interval: idle + Σ processes = device energy
// (1e-9), the processes' cgroups carry the zone "gpu" into their pod and
// jobs, and the holder's job is paid GPU 1's idle.
func TestGPUStageMockNVML(t *testing.T) {
	r := newMockNVMLRun(t)
	watts := []uint64{300, 220}
	var energy [2]float64
	for k := 0; k <= 100; k++ {
		for i, b := range r.bs {
			if k > 0 {
				b.EnergyMJ += watts[i]*1000 + uint64(k)
				energy[i] += (float64(watts[i]*1000) + float64(k)) / 1000
			}
			b.TSUS = uint64(k+1) * 1_000_000
		}
		r.fs.add(1, 100, 0, 1e8) // CPU time, unrelated to the GPU split
		r.l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		checkGPUInterval(t, k, r.l.Snapshot(), energy)
	}
	s := r.l.Snapshot()
	g0, g1 := s.GPUs[0], s.GPUs[1]
	if !gpuNear(g0.IdleJ, 5000) || !gpuNear(g1.IdleJ, 4000) || g0.Method != "counter" || g0.Basis != "sm_util" ||
		g0.UUID != r.devs[0].UUID || g0.Model == "" || g1.Holder == nil || g1.Holder.JobID != "43" || !gpuNear(g1.HolderJ, 4000) {
		t.Fatalf("GPUs %+v", s.GPUs)
	}
	pj := gpuProcessJ(s)
	r.checkProcesses(t, s, pj, energy)
	checkMockNVMLWorkloads(t, s, pj, energy)
}

// A driver reload resets GPU 0's counter mid-run: the GPU's cumulative
// energy never decreases, and the interval spanning the reset is dropped.
func TestGPUStageCounterReset(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := &fakeSource{}
	fs.add(1, 100, 0, 0)
	l := mustLoopWith(t, fs, WithGPUs(node.New(node.Config{}, []gpu.Source{src}, nil, nil), GPUConfig{}))
	prev := -1.0
	for k := 0; k <= 10; k++ {
		bs[0].EnergyMJ += 300_000
		if k == 5 {
			bs[0].EnergyMJ = 1000 // reload
		}
		bs[0].TSUS = uint64(k+1) * 1_000_000
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		e := l.Snapshot().GPUs[0].EnergyJ
		if e < prev {
			t.Fatalf("interval %d: %v < %v", k, e, prev)
		}
		prev = e
	}
	if !gpuNear(prev, 300*9) {
		t.Errorf("energy %v, want 2700 (10 intervals, the one spanning the reset dropped)", prev)
	}
}

func mustLoopWith(t *testing.T, fs *fakeSource, opts ...Option) *Loop {
	t.Helper()
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none"}, fs, m, anyName{}, nil, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func zoneOf(s *snapshot.Snapshot, name string, socket int) snapshot.Zone {
	for _, z := range s.Zones {
		if z.Name == name && z.Socket == socket {
			return z
		}
	}
	return snapshot.Zone{}
}

// A GPU passed through to a VM (libvirt hostdev): the host sees no process
// on it, and its whole energy, idle and dynamic, is paid to the VM's
// workload; the GPU's record says who holds it and that it is whole.
func TestGPUStagePassthrough(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	for _, b := range bs {
		b.SM, b.Mem = nil, nil
	}
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	allocs := staticAllocs{{Device: alloc.Ref{UUID: devs[1].UUID}, Holder: reading.Holder{Kind: reading.HolderVM, VMName: "vm1"}, Whole: true}}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	fs := &fakeSource{}
	fs.add(1, 500, 0, 0)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, IdlePolicy: "none"}, fs, m, names{1: "/machine/qemu-1-vm1.libvirt-qemu/vcpu0"}, nil,
		WithWorkloads(ids, ident.Levels()), WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"1": 40}}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 10; k++ {
		bs[1].EnergyMJ += 220_000
		fs.add(1, 500, 0, 1e7)
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
	}
	s := l.Snapshot()
	g1 := s.GPUs[1]
	var vm snapshot.Workload
	ok := false
	for _, u := range s.Workloads {
		if u.Level == string(ident.KindVM) {
			vm, ok = u, true
		}
	}
	e := vm.Energy.Get(reading.ZoneGPU)
	if !ok || g1.Holder == nil || !g1.Holder.Whole || g1.Holder.VM != "vm1" || !gpuNear(g1.HolderJ, 2200) ||
		!gpuNear(e.IdleJ, 400) || !gpuNear(e.DynamicJ, 1800) || len(g1.Processes) != 0 {
		t.Fatalf("GPU 1 %+v; VM %+v (found %v)", g1, vm, ok)
	}
	// The host cannot see the guest's processes: whether the VM uses its
	// GPU cannot be told, so no idle ratio is published.
	if h := g1.Holders[0]; h.IdleObservable || !math.IsNaN(h.IdleRatio) || g1.Holder.IdleObservable {
		t.Errorf("VM holder %+v: an idle ratio for a GPU whose users the host cannot see", h)
	}
}

// BenchmarkGPUStage8GPUs100Procs: the GPU stage of one interval on 8 mock
// A100s with 100 GPU processes (SM samples) that the ledger knows: read,
// resolve, split through pkg/model and credit the processes and their
// cgroups. The mock answers at no cost, so this is wattrace's own CPU.
func BenchmarkGPUStage8GPUs100Procs(b *testing.B) {
	srv := dgxa100.NewWithGPUs(gpus.Multiple(8, gpus.A100_SXM4_40GB)...)
	boards := make([]*gpuBoard, 8)
	fs := &fakeSource{}
	for i := range boards {
		bd := &gpuBoard{EnergyMJ: 1, SM: map[uint32]uint32{}}
		for p := 0; p < 100/8+btoi(i < 100%8); p++ {
			pid := uint32(1000*(i+1) + p)
			bd.SM[pid] = uint32(10 * (1 + p%9))
			fs.add(uint64(1+p%10), pid, 0, 0)
		}
		boards[i] = bd
		wireGPU(srv.Devices[i].(*server.Device), bd)
	}
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	led := newLedger(anyName{}, time.Minute, newShares(nil))
	st := newGPUStage(node.New(node.Config{}, []gpu.Source{src}, nil, nil), GPUConfig{}, led, &credits{})
	now := gpuT0
	r, _ := fs.Read()
	led.absorbReading(r, now, true)
	st.read(context.Background(), now, 0)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, bd := range boards {
			bd.EnergyMJ += 300_000
			bd.TSUS += 1_000_000
		}
		now = now.Add(time.Second)
		st.read(context.Background(), now, time.Second)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// MIG through the loop: the board's energy splits among instances (by SMs)
// and then among their processes (by memory), conserved every interval
// (idle + Σ processes = board energy, 1e-9); the Slurm job holding
// instance b (Slurm's order map names "0.<gi>") appears among the board's
// instance holders, and the board's own holder stays empty.
func TestGPUStageMIG(t *testing.T) {
	srv, bs, _, b, smA, smB := migBoards(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := "0." + gpuItoa(b)
	allocs := staticAllocs{{Device: alloc.Ref{Index: inst}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "77"}}}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	fs := &fakeSource{}
	for _, pid := range []uint32{10, 11, 12} {
		fs.add(1, pid, 0, 0)
	}
	l := mustLoopWith(t, fs, WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 60}}))
	for k := 0; k <= 10; k++ {
		bs[0].EnergyMJ += 400_000
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		d := l.Snapshot().GPUs[0]
		var procs float64
		for _, p := range d.Processes {
			procs += p.DynamicJ
		}
		if !gpuNear(d.IdleJ+procs, d.EnergyJ) || !gpuNear(d.EnergyJ, 400*float64(k)) {
			t.Fatalf("interval %d: %+v (processes %v)", k, d, procs)
		}
	}
	d := l.Snapshot().GPUs[0]
	pj := map[uint32]float64{}
	for _, p := range d.Processes {
		pj[p.PID] = p.DynamicJ
	}
	fa := float64(smA) / float64(smA+smB)
	if !gpuNear(pj[10], 3400*fa/4) || !gpuNear(pj[11], 3400*fa*3/4) || !gpuNear(pj[12], 3400*(1-fa)) {
		t.Errorf("MIG processes %v (a %d SMs, b %d)", pj, smA, smB)
	}
	if d.Holder != nil || len(d.InstanceHolders) != 1 || d.InstanceHolders[0].Instance != inst || d.InstanceHolders[0].JobID != "77" {
		t.Errorf("holders %+v %+v", d.Holder, d.InstanceHolders)
	}
}

// fixedIntensity is a carbon-intensity source with one factor.
type fixedIntensity struct{ g float64 }

func (f fixedIntensity) Factor() (reading.CarbonFactor, bool) {
	return reading.CarbonFactor{Provider: "test", Zone: "XX", GramsPerKWh: f.g}, true
}
func (fixedIntensity) Intensities() []reading.Intensity { return nil }
func (fixedIntensity) Health() []reading.SourceHealth   { return nil }

// The GPUs' energy is priced like the meter's: each device zone's grams
// are its joules at the factor, and the processes' GPU grams plus the
// device's idle and unattributed grams add up to them.
func TestGPUStageEmissions(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := node.New(node.Config{}, []gpu.Source{src}, nil, nil)
	fs := &fakeSource{}
	for pid, cg := range map[uint32]uint64{100: 1, 101: 2, 102: 3, 103: 3, 200: 4} {
		fs.add(cg, pid, 0, 0)
	}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	const factor = 400.0
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, names{1: "/a", 2: "/b", 3: "/c", 4: "/d"}, nil,
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 50, "1": 40}}), WithEmissions(fixedIntensity{factor}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 20; k++ {
		for i, b := range bs {
			if k > 0 {
				b.EnergyMJ += uint64(200+100*i) * 1000
			}
			b.TSUS = uint64(k+1) * 1_000_000
		}
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
	}
	s := l.Snapshot()
	for i := range s.GPUs {
		z := zoneOf(s, reading.ZoneGPU, i)
		var zg snapshot.NodeGrams
		for _, ng := range z.Grams {
			zg.DynamicG += ng.DynamicG
			zg.IdleG += ng.IdleG
			zg.UnattributedG += ng.UnattributedG
		}
		want := carbon.Grams(z.EnergyJ, factor)
		if z.EnergyJ == 0 || !gpuNear(zg.DynamicG+zg.IdleG, want) || !gpuNear(zg.IdleG, carbon.Grams(z.IdleJ, factor)) {
			t.Fatalf("GPU %d zone grams %+v, want %v for %v J", i, zg, want, z.EnergyJ)
		}
		var procs float64
		for _, p := range s.GPUs[i].Processes {
			for _, c := range s.Processes {
				if c.PID == p.PID {
					procs += c.Grams.Get("test", reading.ZoneGPU).DynamicG
				}
			}
		}
		if !gpuNear(procs+zg.IdleG+zg.UnattributedG, want) {
			t.Fatalf("GPU %d: processes %v g + idle %v g + unattributed %v g != %v g", i, procs, zg.IdleG, zg.UnattributedG, want)
		}
	}
}

// A PID reused by a new process (another start time) starts a new GPU
// process record: the new process does not inherit the old one's joules
// or keep its comm, and only one record is published for the pid.
func TestGPUStagePIDReuse(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	bs[0].SM = map[uint32]uint32{100: 50}
	bs[1].SM = nil
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := node.New(node.Config{}, []gpu.Source{src}, nil, nil)
	fs := &fakeSource{}
	fs.r.Processes = []reading.ProcessUsage{{Key: reading.ProcKey{PID: 100, StartTime: 1}, Comm: "old", Cgroup: 1, Alive: true}}
	fs.r.Cgroups = []reading.CgroupUsage{{ID: 1}, {ID: 2}}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, names{1: "/a", 2: "/b"}, nil,
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 100, "1": 100}}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 6; k++ {
		if k == 4 { // the old process exited; its pid is reused
			fs.r.Processes = []reading.ProcessUsage{{Key: reading.ProcKey{PID: 100, StartTime: 2}, Comm: "new", Cgroup: 2, Alive: true}}
		}
		if k > 0 {
			bs[0].EnergyMJ += 300_000 // 200 J dynamic a second
			bs[1].EnergyMJ += 100_000
		}
		bs[0].TSUS = uint64(k+1) * 1_000_000
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
	}
	ps := l.Snapshot().GPUs[0].Processes
	if len(ps) != 1 || ps[0].PID != 100 || ps[0].Comm != "new" || ps[0].Cgroup != "/b" || !gpuNear(ps[0].DynamicJ, 3*200) {
		t.Fatalf("processes after PID reuse: %+v", ps)
	}
}

// A mock NVML that lacks the GPM symbols
// and fails init or device count with each error other than "no driver"
// leaves the exporter up: the stats loop runs, CPU energy flows to the
// process, and the GPU source's health is down with the reason. Once
// NVML answers again the source comes back on its own and GPU energy
// flows; when every device then fails at once (a driver reload) it goes
// down and re-initialises, and the device stops showing its last power.
func TestGPUStageNVMLErrorsDegradeOnlyTheGPUs(t *testing.T) {
	for _, v := range []struct {
		call   string
		ret    gonvml.Return
		reason string
	}{
		{"init", gonvml.ERROR_LIB_RM_VERSION_MISMATCH, "nvml_driver_library_mismatch"},
		{"init", gonvml.ERROR_UNKNOWN, "nvml_unknown_error"},
		{"init", gonvml.ERROR_GPU_IS_LOST, "nvml_gpu_lost"},
		{"count", gonvml.ERROR_GPU_IS_LOST, "nvml_gpu_lost"},
		{"count", gonvml.ERROR_LIB_RM_VERSION_MISMATCH, "nvml_driver_library_mismatch"},
		{"count", gonvml.ERROR_UNKNOWN, "nvml_unknown_error"},
	} {
		t.Run(v.call+"/"+v.reason, func(t *testing.T) {
			srv, bs := twoMockGPUs(t)
			srv.LookupSymbolFunc = func(s string) error {
				if strings.HasPrefix(s, "nvmlGpm") {
					return errors.New("undefined symbol")
				}
				return nil
			}
			broken := true
			srv.InitFunc = func() gonvml.Return {
				if broken && v.call == "init" {
					return v.ret
				}
				return gonvml.SUCCESS
			}
			srv.DeviceGetCountFunc = func() (int, gonvml.Return) {
				if broken && v.call == "count" {
					return 0, v.ret
				}
				return len(srv.Devices), gonvml.SUCCESS
			}
			src, err := nvml.New(srv, nvml.Options{}, nil)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			g := node.New(node.Config{}, []gpu.Source{src}, nil, nil)
			fs := &fakeSource{}
			fs.add(1, 100, 0, 0)
			m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
			l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, names{1: "/a"}, nil,
				WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 100, "1": 100}}))
			if err != nil {
				t.Fatal(err)
			}
			step := func(k int) *snapshot.Snapshot {
				m.samples[0].Joules += 50
				fs.add(1, 100, 0, 1e8)
				for _, b := range bs {
					b.EnergyMJ += 300_000
					b.TSUS = uint64(k+1) * 1_000_000
				}
				l.Step(gpuT0.Add(time.Duration(k) * time.Second))
				return l.Snapshot()
			}
			var s *snapshot.Snapshot
			for k := 0; k < 4; k++ {
				s = step(k)
			}
			var cpu float64
			for _, p := range s.Processes {
				cpu += p.Energy.Get("package").DynamicJ + p.Energy.Get("package").IdleJ
			}
			if cpu <= 0 || len(s.GPUs) != 0 {
				t.Fatalf("while NVML is down: process package energy %v, GPUs %d", cpu, len(s.GPUs))
			}
			if h := meterHealth(s, "nvml"); h == nil || h.Up || h.Reason != v.reason {
				t.Fatalf("health %+v, want down with %s", h, v.reason)
			}
			broken = false
			for k := 4; k < 20; k++ { // retries at 5 s, then 10 s
				s = step(k)
			}
			if len(s.GPUs) != 2 || !gpuNear(s.GPUs[0].PowerW, 300) || s.GPUs[0].EnergyJ <= 0 {
				t.Fatalf("after recovery: %+v", s.GPUs)
			}
			for _, d := range srv.Devices {
				d.(*server.Device).GetTotalEnergyConsumptionFunc = func() (uint64, gonvml.Return) {
					return 0, gonvml.ERROR_UNINITIALIZED
				}
			}
			s = step(20)
			if !math.IsNaN(s.GPUs[0].PowerW) {
				t.Fatalf("a failed device still shows %v W", s.GPUs[0].PowerW)
			}
			if h := meterHealth(s, "nvml/"+s.GPUs[0].UUID); h == nil || h.Up || h.Reason != "nvml_driver_not_loaded" {
				t.Fatalf("health after every device failed: %+v", h)
			}
		})
	}
}

func meterHealth(s *snapshot.Snapshot, source string) *reading.SourceHealth {
	for i := range s.Meters {
		if s.Meters[i].Source == source {
			return &s.Meters[i]
		}
	}
	return nil
}

// rotatingAllocs lists the same allocations in a different order at
// every call, as globbing or the kubelet may.
type rotatingAllocs struct {
	as []alloc.Allocation
	n  int
}

func (*rotatingAllocs) Name() string { return "rotating" }
func (r *rotatingAllocs) Allocations(context.Context) ([]alloc.Allocation, error) {
	r.n++
	k := r.n % len(r.as)
	return append(append([]alloc.Allocation(nil), r.as[k:]...), r.as[:k]...), nil
}

// Four holders share GPU 1 (Slurm shards
// or time-slicing replicas), listed in a different order each interval.
// Under the holder policy its 40 W idle is split evenly and always the
// same way: 10 J a second each. Each holder's credit carries its grams,
// so the job's GPU grams are its GPU joules × the factor. A MIG board
// pays its idle to the holders of its instances by their SMs.
func TestGPUStageSharedHoldersAndGrams(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	bs[1].SM, bs[1].Mem = nil, nil
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	ra := &rotatingAllocs{}
	paths := names{}
	fs := &fakeSource{}
	for i, job := range []string{"53", "51", "54", "52"} {
		ra.as = append(ra.as, alloc.Allocation{Device: alloc.Ref{UUID: devs[1].UUID}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: job}})
		paths[uint64(i+1)] = "/slurm_n1/uid_0/job_" + job + "/step_0/task_0"
		fs.add(uint64(i+1), uint32(500+i), 0, 0)
	}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{ra}, nil)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	const factor = 400.0
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, paths, nil,
		WithWorkloads(ids, ident.Levels()),
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 50, "1": 40}, IdlePolicy: "holder"}),
		WithEmissions(fixedIntensity{factor}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 10; k++ {
		for _, b := range bs {
			b.EnergyMJ += 100_000
			b.TSUS = uint64(k+1) * 1_000_000
		}
		for i := range 4 {
			fs.add(uint64(i+1), uint32(500+i), 0, 1e7)
		}
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		s := l.Snapshot()
		for _, job := range []string{"51", "52", "53", "54"} {
			u, ok := unitBy(s, ident.KindJob, job)
			e := u.Energy.Get(reading.ZoneGPU)
			if !ok || !gpuNear(e.IdleJ, 10*float64(k)) || e.DynamicJ != 0 {
				t.Fatalf("interval %d job %s: %+v (found %v)", k, job, e, ok)
			}
			gr := u.Grams.Get("test", reading.ZoneGPU)
			if k > 0 && (!gpuNear(gr.IdleG, carbon.Grams(e.IdleJ, factor)) || gr.DynamicG != 0) {
				t.Fatalf("interval %d job %s: %v J but %+v g", k, job, e.IdleJ, gr)
			}
		}
		if d := s.GPUs[1]; len(d.Holders) != 4 || d.Holders[0].JobID != "51" || d.Holders[3].JobID != "54" || !gpuNear(d.HolderJ, 40*float64(k)) {
			t.Fatalf("interval %d holders %+v, holder joules %v", k, d.Holders, d.HolderJ)
		}
	}
}

// Under the holder policy a MIG board's idle is divided among its
// instances by SMs, and a held instance's part is paid to its holder.
func TestGPUStageMIGInstanceHoldersPaid(t *testing.T) {
	srv, bs, _, b, _, _ := migBoards(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var sms, smB float64
	rs, _ := src.Read(context.Background(), gpuT0.Add(-time.Second))
	for _, in := range rs[0].Instances {
		sms += float64(in.SMs)
		if in.ID == int(b) {
			smB = float64(in.SMs)
		}
	}
	inst := "0." + gpuItoa(b)
	allocs := staticAllocs{{Device: alloc.Ref{Index: inst}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "77"}}}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	fs := &fakeSource{}
	fs.add(1, 12, 0, 0)
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m,
		names{1: "/slurm_n1/uid_0/job_77/step_0/task_0"}, nil, WithWorkloads(ids, ident.Levels()),
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 60}, IdlePolicy: "holder"}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 10; k++ {
		bs[0].EnergyMJ += 400_000
		fs.add(1, 12, 0, 1e7)
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
	}
	s := l.Snapshot()
	u, ok := unitBy(s, ident.KindJob, "77")
	want := 600 * smB / sms
	if e := u.Energy.Get(reading.ZoneGPU); !ok || !gpuNear(e.IdleJ, want) || !gpuNear(s.GPUs[0].HolderJ, want) {
		t.Fatalf("job 77 idle %v, device holder joules %v, want %v", e.IdleJ, s.GPUs[0].HolderJ, want)
	}
}
