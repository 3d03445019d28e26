//go:build cgo

package stats

import (
	"context"
	"math"
	"testing"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/pkg/gpu"
	"github.com/wattrace/wattrace/pkg/gpu/alloc"
	"github.com/wattrace/wattrace/pkg/gpu/nvml"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

func sameRatio(got, want float64) bool { return got == want || math.IsNaN(got) && math.IsNaN(want) }

// Acceptance on mock NVML: Slurm job 43 holds both A100s. Its pid 300
// holds a context on GPU 0 (memory) but is never sampled busy; its pid
// 200 keeps GPU 1 busy. GPU 0 is held idle (1), GPU 1 used (0); the
// baseline tells nothing (NaN). When pid 300 runs kernels GPU 0 turns 0;
// when NVML's per-process call fails, GPU 0's usage is unknown (NaN, not
// idle) while GPU 1 stays 0.
func TestGPUHeldIdleNVML(t *testing.T) {
	srv, bs := twoMockGPUs(t)
	bs[0].SM, bs[0].Mem = nil, map[uint32]uint64{300: 1 << 30}
	bs[1].SM, bs[1].Mem = map[uint32]uint32{200: 50}, map[uint32]uint64{200: 1 << 30}
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	devs := src.Devices()
	job := reading.Holder{Kind: reading.HolderSlurmJob, JobID: "43"}
	allocs := staticAllocs{{Device: alloc.Ref{UUID: devs[0].UUID}, Holder: job}, {Device: alloc.Ref{UUID: devs[1].UUID}, Holder: job}}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	fs := &fakeSource{}
	fs.add(4, 300, 0, 0)
	fs.add(4, 200, 0, 0)
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m,
		names{4: "/slurm_n1/uid_0/job_43/step_0/task_0"}, nil,
		WithWorkloads(ids, ident.Levels()), WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 50, "1": 40}}))
	if err != nil {
		t.Fatal(err)
	}
	step := func(k int, want0, want1 float64) {
		t.Helper()
		for _, b := range bs {
			b.EnergyMJ += 200_000
			b.TSUS = uint64(k+1) * 1_000_000
		}
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
		s := l.Snapshot()
		for gi, want := range []float64{want0, want1} {
			got, ok := holderIdle(s, gi, "43")
			if !ok || !sameRatio(got, want) {
				t.Fatalf("interval %d GPU %d: job 43 idle ratio %v (observable %v), want %v", k, gi, got, ok, want)
			}
		}
	}
	step(0, math.NaN(), math.NaN())
	for k := 1; k <= 5; k++ {
		step(k, 1, 0)
	}
	if s0, s1 := holderIdleSeconds(l.Snapshot(), 0, "43"), holderIdleSeconds(l.Snapshot(), 1, "43"); s0 != 5 || s1 != 0 {
		t.Fatalf("job 43 held idle %v s on GPU 0, %v s on GPU 1; want 5, 0", s0, s1)
	}
	bs[0].SM = map[uint32]uint32{300: 20}
	step(6, 0, 0)
	d0 := srv.Devices[0].(*server.Device)
	d0.GetProcessUtilizationFunc = func(uint64) ([]gonvml.ProcessUtilizationSample, gonvml.Return) {
		return nil, gonvml.ERROR_UNKNOWN
	}
	step(7, math.NaN(), 0)
	// Neither a used nor an unknown interval adds to the count.
	if s0 := holderIdleSeconds(l.Snapshot(), 0, "43"); s0 != 5 {
		t.Fatalf("job 43 held idle %v s on GPU 0 after used and unknown intervals, want 5", s0)
	}
}

// MIG on mock NVML, by memory (no per-process activity under MIG): job 77
// holds instance b, where its pid 12 is resident, and job 78 holds the
// 1-slice instance, which runs nothing. 77 is not idle (a resident process
// cannot be told from a busy one by memory), 78 is.
func TestGPUHeldIdleMIG(t *testing.T) {
	srv, bs, _, b, _, _ := migBoards(t)
	src, err := nvml.New(srv, nvml.Options{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rs, _ := src.Read(context.Background(), gpuT0.Add(-time.Second))
	var empty string
	for _, in := range rs[0].Instances {
		if len(in.Usage) == 0 {
			empty = in.Name
		}
	}
	if empty == "" {
		t.Fatalf("no empty instance in %+v", rs[0].Instances)
	}
	allocs := staticAllocs{
		{Device: alloc.Ref{Index: "0." + gpuItoa(b)}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "77"}},
		{Device: alloc.Ref{Index: empty}, Holder: reading.Holder{Kind: reading.HolderSlurmJob, JobID: "78"}},
	}
	g := node.New(node.Config{}, []gpu.Source{src}, []alloc.Source{allocs}, nil)
	fs := &fakeSource{}
	fs.add(1, 12, 0, 0)
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, fs, m,
		names{1: "/slurm_n1/uid_0/job_77/step_0/task_0"}, nil, WithWorkloads(ids, ident.Levels()),
		WithGPUs(g, GPUConfig{IdleWatts: map[string]float64{"0": 60}}))
	if err != nil {
		t.Fatal(err)
	}
	for k := 0; k <= 3; k++ {
		bs[0].EnergyMJ += 400_000
		l.Step(gpuT0.Add(time.Duration(k) * time.Second))
	}
	s := l.Snapshot()
	r77, ok77 := holderIdle(s, 0, "77")
	r78, ok78 := holderIdle(s, 0, "78")
	if !ok77 || !ok78 || r77 != 0 || r78 != 1 {
		t.Fatalf("job 77 %v (%v), job 78 %v (%v); holders %+v", r77, ok77, r78, ok78, s.GPUs[0].InstanceHolders)
	}
}
