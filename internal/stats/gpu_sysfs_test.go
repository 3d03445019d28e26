package stats

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/gpu/sysfs"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"

	"github.com/wattrace/wattrace/internal/gpu/sysfs/sysfstest"
)

// Moved from pkg/gpu/sysfs when the split moved from the GPU sources into
// this stage: the fixture trees' readings go through splitGPU.

var sysT0 = time.Unix(1_700_000_000, 0)

type gpuTree = sysfstest.Tree

func newGPUTree(t *testing.T) *gpuTree { return sysfstest.NewTree(t) }

var drmBusy = sysfstest.Busy

func drmCycles(pdev string, id int, cy, total uint64) string {
	return fmt.Sprintf("drm-driver:\txe\ndrm-pdev:\t%s\ndrm-client-id:\t%d\ndrm-cycles-rcs:\t%d\ndrm-total-cycles-rcs:\t%d\n",
		pdev, id, cy, total)
}

func sysNear(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(math.Abs(a), math.Abs(b)) }

// splitTrees is TestSplitFromFixtureTrees' fixture: three cards' hwmon
// directories and their processes' fdinfo files.
type splitTrees struct {
	tr                   *gpuTree
	amdHW, intelHW, xeHW string
	// amd is each amdgpu process's busy time, ‰ of each interval; xe each
	// xe process's busy cycles per interval, in millions.
	amd, xe       map[int]uint64
	files         map[int]string
	shared, intel string
}

func newSplitTrees(t *testing.T) *splitTrees {
	tr := newGPUTree(t)
	f := &splitTrees{tr: tr, amd: map[int]uint64{101: 600, 102: 300, 103: 100}, xe: map[int]uint64{301: 3, 302: 1},
		files: map[int]string{}}
	f.amdHW = tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "200000000\n"})
	f.intelHW = tr.Card(1, "0000:00:02.0", "i915", map[string]string{"name": "i915\n", "energy1_input": "1000000\n"})
	f.xeHW = tr.Card(2, "0000:4d:00.0", "xe", map[string]string{"name": "xe\n", "energy1_label": "card\n",
		"energy1_input": "0\n", "energy2_label": "pkg\n", "energy2_input": "0\n"})
	// A card of a driver we do not read, and a process with a non-DRM fd.
	tr.Card(3, "0000:05:00.0", "nouveau", map[string]string{"power1_input": "1"})
	tr.Link("/dev/null", filepath.Join(tr.Proc, "1", "fd", "0"))
	tr.Write(filepath.Join(tr.Proc, "1", "fdinfo", "0"), "pos:\t0\n")
	for pid := range f.amd {
		f.files[pid] = tr.Client(pid, "0000:03:00.0", "amdgpu", pid)
	}
	// pid 104 shares pid 103's client (a forked child): counted once.
	f.shared = tr.Client(104, "0000:03:00.0", "amdgpu", 103)
	f.intel = tr.Client(201, "0000:00:02.0", "i915", 7)
	for pid := range f.xe {
		f.files[pid] = tr.Client(pid, "0000:4d:00.0", "xe", pid)
	}
	return f
}

// write sets the files as they stand after k intervals of 1 s: the
// processes' busy time, the amdgpu card's power (200 W and a little
// more each interval), the i915 card's counter (150 J an interval) and the
// xe card's (90 J for the card, 70 J for its package).
func (f *splitTrees) write(k int) {
	tr := f.tr
	ms := uint64(k) * 1000
	for pid, pm := range f.amd {
		tr.Write(f.files[pid], drmBusy("amdgpu", "0000:03:00.0", pid, "gfx", pm*ms*1000))
	}
	tr.Write(f.shared, drmBusy("amdgpu", "0000:03:00.0", 103, "gfx", f.amd[103]*ms*1000))
	tr.Write(f.intel, drmBusy("i915", "0000:00:02.0", 7, "render", 400*ms*1000))
	for pid, c := range f.xe {
		tr.Write(f.files[pid], drmCycles("0000:4d:00.0", pid, c*uint64(k)*1_000_000, uint64(k)*19_200_000))
	}
	tr.Write(filepath.Join(f.amdHW, "power1_average"), fmt.Sprint(200_000_000+k*1000))
	tr.Write(filepath.Join(f.intelHW, "energy1_input"), fmt.Sprint(1_000_000+k*150_000_000))
	tr.Write(filepath.Join(f.xeHW, "energy1_input"), fmt.Sprint(k*90_000_000))
	tr.Write(filepath.Join(f.xeHW, "energy2_input"), fmt.Sprint(k*70_000_000))
}

// checkFixtureDevices: the three cards read, in order, not the nouveau one.
func checkFixtureDevices(t *testing.T, devs []reading.GPUDevice) {
	t.Helper()
	if len(devs) != 3 || devs[0].PCIBusID != "0000:03:00.0" || devs[0].Vendor != reading.VendorAMD ||
		devs[1].Vendor != reading.VendorIntel || devs[2].PCIBusID != "0000:4d:00.0" {
		t.Fatalf("devices %+v", devs)
	}
}

// splitCard checks card i's reading of interval k (energy, method, basis)
// and splits it: idle is the card's idle model's and idle + Σ processes is
// the card's energy, to 1e-9. Each process's share is added to sum.
func splitCard(t *testing.T, k, i int, r reading.GPUReading, idle model.IdleModel, res *gpuResult, sum map[int]float64) {
	t.Helper()
	if !r.OK || r.Basis != reading.BasisEngineTime {
		t.Fatalf("interval %d card %d: %+v", k, i, r)
	}
	// amdgpu's power: the trapezoid between the two reads.
	wantE := []float64{200 + (float64(k)-0.5)/1000, 150, 90}[i]
	wantM := []reading.GPUMethod{reading.MethodPowerIntegrated, reading.MethodCounter, reading.MethodCounter}[i]
	if !sysNear(r.EnergyJ, wantE) || r.Method != wantM {
		t.Fatalf("interval %d card %d: energy %v %s, want %v %s", k, i, r.EnergyJ, r.Method, wantE, wantM)
	}
	splitGPU(r, idle, gpuOptions{}, res)
	var procs float64
	for pid, j := range res.Processes {
		sum[pid] += j
		procs += j
	}
	if !sysNear(res.IdleJ+procs, r.EnergyJ) || res.UnattributedJ != 0 || !sysNear(res.IdleJ, []float64{30, 10, 20}[i]) {
		t.Fatalf("interval %d card %d: idle %v + procs %v != %v", k, i, res.IdleJ, procs, r.EnergyJ)
	}
}

// checkFixtureSplit checks the processes' dynamic energy over the 100
// intervals: amdgpu 6:3:1 (the forked child's shared client counted
// once), i915 wholly to pid 201, xe 3:1; and the source's health.
func checkFixtureSplit(t *testing.T, sum map[int]float64, src *sysfs.Source) {
	t.Helper()
	if !sysNear(sum[101]/sum[103], 6) || !sysNear(sum[102]/sum[103], 3) || sum[104] != 0 {
		t.Errorf("AMD split %v %v %v (shared-client pid 104: %v), want 6:3:1", sum[101], sum[102], sum[103], sum[104])
	}
	if !sysNear(sum[201], 100*(150-10)) {
		t.Errorf("Intel pid 201: %v", sum[201])
	}
	if !sysNear(sum[301]/sum[302], 3) || !sysNear(sum[301]+sum[302], 100*(90-20)) {
		t.Errorf("xe split %v %v", sum[301], sum[302])
	}
	if n := src.Rejects().Counts(); len(n) != 0 {
		t.Errorf("rejections %v", n)
	}
	h := src.Health()
	if len(h) != 3 || !h[0].Up || h[0].Source != "gpu-sysfs/0000:03:00.0" {
		t.Errorf("health %+v", h)
	}
}

// Acceptance: an amdgpu card (power integrated) with three processes busy
// 60/30/10 % of each interval, an i915 card (energy counter) with one, and
// an xe card (card energy channel, busy cycles) with two at 3:1; the files
// change every interval. Dynamic energy splits by busy time, idle is the
// idle model's and idle + Σ processes = card energy to 1e-9, every interval.
func TestSplitFromFixtureTrees(t *testing.T) {
	f := newSplitTrees(t)
	src, err := sysfs.Open(sysfs.Options{SysfsRoot: f.tr.Sys, ProcfsRoot: f.tr.Proc}, nil)
	if err != nil || src == nil {
		t.Fatal(src, err)
	}
	checkFixtureDevices(t, src.Devices())
	idle := []model.IdleModel{&model.ConfiguredIdle{Watts: 30}, &model.ConfiguredIdle{Watts: 10}, &model.ConfiguredIdle{Watts: 20}}
	sum := map[int]float64{}
	var res gpuResult
	for k := 0; k <= 100; k++ {
		f.write(k)
		rs, err := src.Read(context.Background(), sysT0.Add(time.Duration(k)*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		if k == 0 {
			continue
		}
		for i, r := range rs {
			splitCard(t, k, i, r, idle[i], &res, sum)
		}
		if k == 50 && !sysNear(rs[0].Utilization, 1) {
			t.Errorf("amdgpu utilization %v, want 1 (gfx time-sliced 60+30+10 %%)", rs[0].Utilization)
		}
	}
	checkFixtureSplit(t, sum, src)
}

// AMD and Intel GPUs end to end through the stats loop: the real
// sysfs source on a fixture tree, an amdgpu card (power integrated, 200 W)
// with pids 101/102/103 busy 60/30/10 % and an i915 card (energy counter,
// 150 J per interval) with pid 201. Idle is 30 W (by PCI address) and
// 10 W (by index 1). Over 100 intervals of the loop: every interval idle +
// Σ processes = card energy to 1e-9, the AMD dynamic splits 6:3:1, the
// Intel card's wholly to pid 201, and the processes' cgroups carry the
// zone "gpu" into their pod and job.
func TestGPUStageSysfsLoop(t *testing.T) {
	tr := newGPUTree(t)
	amdHW := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "200000000\n"})
	intelHW := tr.Card(1, "0000:00:02.0", "i915", map[string]string{"name": "i915\n", "energy1_input": "1000000\n"})
	amd := map[int]uint64{101: 600, 102: 300, 103: 100}
	files := map[int]string{}
	for pid := range amd {
		files[pid] = tr.Client(pid, "0000:03:00.0", "amdgpu", pid)
	}
	intel := tr.Client(201, "0000:00:02.0", "i915", 7)
	g, err := node.Open(node.Config{NVML: "off", SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	if err != nil || len(g.Devices()) != 2 {
		t.Fatalf("%v %v", g, err)
	}
	defer g.Close()
	paths := names{
		1: podPath + "aaaa000000000000000000000000000000000000000000000000000000000000.scope",
		3: "/slurm_n1/uid_0/job_42/step_0/task_0",
		4: "/slurm_n1/uid_0/job_43/step_0/task_0",
	}
	fs := &fakeSource{}
	for pid, cg := range map[uint32]uint64{101: 1, 102: 1, 103: 3, 201: 4} {
		fs.add(cg, pid, 0, 0)
	}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, paths, nil,
		WithWorkloads(ids, ident.Levels()),
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0000:03:00.0": 30, "1": 10}}))
	if err != nil {
		t.Fatal(err)
	}
	var energy [2]float64
	for k := 0; k <= 100; k++ {
		ms := uint64(k) * 1000
		for pid, pm := range amd {
			tr.Write(files[pid], drmBusy("amdgpu", "0000:03:00.0", pid, "gfx", pm*ms*1000))
		}
		tr.Write(intel, drmBusy("i915", "0000:00:02.0", 7, "render", 400*ms*1000))
		tr.Write(filepath.Join(amdHW, "power1_average"), "200000000")
		tr.Write(filepath.Join(intelHW, "energy1_input"), fmt.Sprint(1_000_000+k*150_000_000))
		if k > 0 {
			energy[0] += 200
			energy[1] += 150
		}
		l.Step(sysT0.Add(time.Duration(k) * time.Second))
		s := l.Snapshot()
		if len(s.GPUs) != 2 {
			t.Fatalf("interval %d: %+v", k, s.GPUs)
		}
		for i, d := range s.GPUs {
			var procs float64
			for _, p := range d.Processes {
				procs += p.DynamicJ
			}
			if !sysNear(d.EnergyJ, energy[i]) || !sysNear(d.IdleJ+procs, d.EnergyJ) || d.UnattributedJ != 0 {
				t.Fatalf("interval %d card %d: %+v, processes %v, want energy %v", k, i, d, procs, energy[i])
			}
		}
	}
	s := l.Snapshot()
	amdG, intelG := s.GPUs[0], s.GPUs[1]
	if amdG.Source != "sysfs" || amdG.Vendor != "amd" || amdG.Method != "power_integrated" || amdG.Basis != "engine_time" ||
		intelG.Method != "counter" || !sysNear(amdG.IdleJ, 3000) || !sysNear(intelG.IdleJ, 1000) {
		t.Fatalf("%+v", s.GPUs)
	}
	pj := map[uint32]float64{}
	for _, d := range s.GPUs {
		for _, p := range d.Processes {
			pj[p.PID] += p.DynamicJ
		}
	}
	if !sysNear(pj[101]/pj[103], 6) || !sysNear(pj[102]/pj[103], 3) || !sysNear(pj[201], 100*140) {
		t.Errorf("per process %v", pj)
	}
	pod, _ := unitBy(s, ident.KindPod, "0b4c2c6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e")
	j42, _ := unitBy(s, ident.KindJob, "42")
	j43, _ := unitBy(s, ident.KindJob, "43")
	if !sysNear(pod.Energy.Get("gpu").DynamicJ, pj[101]+pj[102]) || !sysNear(j42.Energy.Get("gpu").DynamicJ, pj[103]) ||
		!sysNear(j43.Energy.Get("gpu").DynamicJ, pj[201]) {
		t.Errorf("pod %v job 42 %v job 43 %v", pod.Energy, j42.Energy, j43.Energy)
	}
}

// podPath is a pod's container cgroup directory without its container id.
const podPath = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b4c2c6e_1f2a_4b3c_9d8e_7f6a5b4c3d2e.slice/cri-containerd-"
