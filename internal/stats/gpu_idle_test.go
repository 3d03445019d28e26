package stats

import (
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// holderIdle is the idle ratio published for the holder of GPU index gi
// whose job id or pod is name (and whether there is one).
func holderIdle(s *snapshot.Snapshot, gi int, name string) (float64, bool) {
	for _, g := range s.GPUs {
		if g.Index != gi {
			continue
		}
		for _, h := range append(g.Holders, g.InstanceHolders...) {
			if h.JobID == name || h.Pod == name || h.VM == name {
				return h.IdleRatio, h.IdleObservable
			}
		}
	}
	return math.NaN(), false
}

// Acceptance, amdgpu from sysfs fixtures with the Slurm allocation from
// the job's environ: job 43 holds cards 0 and 1 (SLURM_JOB_GPUS=0,1).
// Its pid 201 keeps card 1 busy; on card 0 its pid 202 holds a DRM client
// that never runs (resident, idle) while pid 101 of a pod keeps card 0
// busy. Card 0 is held idle (1), card 1 used (0); on the baseline nothing
// can be told (NaN). When pid 202 starts working card 0 turns 0; a busy
// process the accounting does not know (pid 999) might be the job's, so
// it is never called idle under it.
func TestGPUHeldIdleSysfs(t *testing.T) {
	tr := newGPUTree(t)
	hw0 := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "200000000\n"})
	hw1 := tr.Card(1, "0000:04:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "150000000\n"})
	c201 := tr.Client(201, "0000:04:00.0", "amdgpu", 1)
	c202 := tr.Client(202, "0000:03:00.0", "amdgpu", 2)
	c101 := tr.Client(101, "0000:03:00.0", "amdgpu", 3)
	c999 := tr.Client(999, "0000:03:00.0", "amdgpu", 4)
	tr.Write(filepath.Join(tr.Proc, "201", "environ"), "SLURM_JOB_ID=43\x00SLURM_JOB_GPUS=0,1\x00")
	g, err := node.Open(node.Config{NVML: "off", Slurm: true, SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	if err != nil || len(g.Devices()) != 2 {
		t.Fatalf("%v %v", g, err)
	}
	defer g.Close()
	paths := names{
		1: podPath + "aaaa000000000000000000000000000000000000000000000000000000000000.scope",
		4: "/slurm_n1/uid_0/job_43/step_0/task_0",
	}
	fs := &fakeSource{}
	for pid, cg := range map[uint32]uint64{101: 1, 201: 4, 202: 4} {
		fs.add(cg, pid, 0, 0)
	}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m, paths, nil,
		WithWorkloads(ids, ident.Levels()), WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 30, "1": 20}}))
	if err != nil {
		t.Fatal(err)
	}
	var busy201, busy202, busy101, busy999 uint64
	step := func(k int) *snapshot.Snapshot {
		tr.Write(c201, drmBusy("amdgpu", "0000:04:00.0", 1, "gfx", busy201))
		tr.Write(c202, drmBusy("amdgpu", "0000:03:00.0", 2, "gfx", busy202))
		tr.Write(c101, drmBusy("amdgpu", "0000:03:00.0", 3, "gfx", busy101))
		tr.Write(c999, drmBusy("amdgpu", "0000:03:00.0", 4, "gfx", busy999))
		tr.Write(filepath.Join(hw0, "power1_average"), "200000000")
		tr.Write(filepath.Join(hw1, "power1_average"), "150000000")
		l.Step(sysT0.Add(time.Duration(k) * time.Second))
		return l.Snapshot()
	}
	check := func(k int, s *snapshot.Snapshot, want0, want1 float64) {
		t.Helper()
		for gi, want := range []float64{want0, want1} {
			got, ok := holderIdle(s, gi, "43")
			if !ok || !(got == want || math.IsNaN(got) && math.IsNaN(want)) {
				t.Fatalf("interval %d card %d: job 43 idle ratio %v (observable %v), want %v; GPUs %+v", k, gi, got, ok, want, s.GPUs)
			}
		}
	}
	check(0, step(0), math.NaN(), math.NaN())
	for k := 1; k <= 5; k++ {
		busy201 += 500e6
		busy101 += 300e6
		check(k, step(k), 1, 0)
	}
	for k := 6; k <= 8; k++ {
		busy202 += 100e6
		busy201 += 500e6
		check(k, step(k), 0, 0)
	}
	// Pid 202 idle again, pid 201 too: both cards held idle.
	check(9, step(9), 1, 1)
	// A busy process on card 0 that the accounting does not know.
	busy999 += 200e6
	check(10, step(10), 0, 1)
}

// holderIdleSeconds is the held-idle seconds published for the holder of
// GPU index gi whose job id is name.
func holderIdleSeconds(s *snapshot.Snapshot, gi int, name string) float64 {
	for _, g := range s.GPUs {
		if g.Index != gi {
			continue
		}
		for _, h := range append(g.Holders, g.InstanceHolders...) {
			if h.JobID == name {
				return h.IdleSeconds
			}
		}
	}
	return math.NaN()
}

// Job 43 holds cards 0 and 1 and keeps only card 1 busy: each interval
// card 0 is held idle adds that interval's exact length (intervals of
// 0.5, 0.75 and 1 s), card 1 stays at 0; an interval in which pid 202
// runs on card 0 adds nothing, and the count goes on after it.
func TestGPUHeldIdleSeconds(t *testing.T) {
	tr := newGPUTree(t)
	hw0 := tr.Card(0, "0000:03:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "200000000\n"})
	hw1 := tr.Card(1, "0000:04:00.0", "amdgpu", map[string]string{"name": "amdgpu\n", "power1_average": "150000000\n"})
	c201 := tr.Client(201, "0000:04:00.0", "amdgpu", 1)
	c202 := tr.Client(202, "0000:03:00.0", "amdgpu", 2)
	tr.Write(filepath.Join(tr.Proc, "201", "environ"), "SLURM_JOB_ID=43\x00SLURM_JOB_GPUS=0,1\x00")
	g, err := node.Open(node.Config{NVML: "off", Slurm: true, SysfsRoot: tr.Sys, ProcfsRoot: tr.Proc}, nil)
	if err != nil || len(g.Devices()) != 2 {
		t.Fatalf("%v %v", g, err)
	}
	defer g.Close()
	fs := &fakeSource{}
	fs.add(4, 201, 0, 0)
	fs.add(4, 202, 0, 0)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m,
		names{4: "/slurm_n1/uid_0/job_43/step_0/task_0"}, nil,
		WithWorkloads(ids, ident.Levels()), WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 30, "1": 20}}))
	if err != nil {
		t.Fatal(err)
	}
	var busy201, busy202 uint64
	at := time.Duration(0)
	step := func(dt time.Duration, want0, want1 float64) {
		t.Helper()
		at += dt
		tr.Write(c201, drmBusy("amdgpu", "0000:04:00.0", 1, "gfx", busy201))
		tr.Write(c202, drmBusy("amdgpu", "0000:03:00.0", 2, "gfx", busy202))
		tr.Write(filepath.Join(hw0, "power1_average"), "200000000")
		tr.Write(filepath.Join(hw1, "power1_average"), "150000000")
		l.Step(sysT0.Add(at))
		s := l.Snapshot()
		for gi, want := range []float64{want0, want1} {
			if got := holderIdleSeconds(s, gi, "43"); got != want {
				t.Fatalf("at %v card %d: job 43 held idle %v s, want %v", at, gi, got, want)
			}
		}
	}
	step(0, 0, 0)
	busy201 += 200e6
	step(500*time.Millisecond, 0.5, 0)
	busy201 += 200e6
	step(750*time.Millisecond, 1.25, 0)
	busy201 += 200e6
	busy202 += 100e6
	step(time.Second, 1.25, 0)
	busy201 += 200e6
	step(time.Second, 2.25, 0)
}
