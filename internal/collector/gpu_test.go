package collector

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/wattrace/wattrace/internal/snapshot"
)

// The idle ratio is exported per holder with the allocation's labels
// (passthrough aside), its value as the snapshot has it, NaN included;
// a VM, whose processes the host cannot see, has no series.
func TestGPUAllocationIdleRatio(t *testing.T) {
	snap := &snapshot.Snapshot{GPUs: []snapshot.GPU{
		{Index: 0, UUID: "GPU-a", Holders: []snapshot.GPUHolder{
			{Kind: "slurm", JobID: "42", IdleObservable: true, IdleRatio: 1, IdleSeconds: 1800},
			{Kind: "pod", Namespace: "ml", Pod: "p", Container: "c", IdleObservable: true, IdleRatio: 0}}},
		{Index: 1, UUID: "GPU-b", Holders: []snapshot.GPUHolder{{Kind: "slurm", JobID: "42", IdleObservable: true, IdleRatio: math.NaN(), IdleSeconds: 12.5}},
			InstanceHolders: []snapshot.GPUHolder{{Kind: "slurm", JobID: "43", Instance: "1.2", IdleObservable: true, IdleRatio: 0}}},
		{Index: 2, UUID: "GPU-c", Holders: []snapshot.GPUHolder{{Kind: "vm", VM: "vm1", Whole: true, IdleRatio: math.NaN()}}},
	}}
	e := newExporter(t, snap, Options{Enabled: on(NameGPU)})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got, secs := map[string]float64{}, map[string]float64{}
	var allocs int
	for _, mf := range mfs {
		switch mf.GetName() {
		case "wattrace_gpu_allocation_info":
			allocs = len(mf.GetMetric())
		case "wattrace_gpu_allocation_idle_ratio":
			for _, m := range mf.GetMetric() {
				got[key(m)] = m.GetGauge().GetValue()
			}
		case "wattrace_gpu_allocation_idle_seconds_total":
			for _, m := range mf.GetMetric() {
				secs[key(m)] = m.GetCounter().GetValue()
			}
		}
	}
	want := map[string]float64{
		"container=,gpu=0,instance=,job_id=42,kind=slurm,namespace=,pod=,uuid=GPU-a,vm=":    1,
		"container=c,gpu=0,instance=,job_id=,kind=pod,namespace=ml,pod=p,uuid=GPU-a,vm=":    0,
		"container=,gpu=1,instance=1.2,job_id=43,kind=slurm,namespace=,pod=,uuid=GPU-b,vm=": 0,
		"container=,gpu=1,instance=,job_id=42,kind=slurm,namespace=,pod=,uuid=GPU-b,vm=":    math.NaN(),
	}
	if allocs != 5 || len(got) != len(want) {
		t.Fatalf("%d allocation series; idle ratios %v, want %v", allocs, got, want)
	}
	for k, w := range want {
		g, ok := got[k]
		if !ok || !(g == w || math.IsNaN(g) && math.IsNaN(w)) {
			t.Errorf("%s: %v (present %v), want %v", k, g, ok, w)
		}
	}
	// The counter has the ratio's series (no VM), with the seconds.
	wantSecs := map[string]float64{
		"container=,gpu=0,instance=,job_id=42,kind=slurm,namespace=,pod=,uuid=GPU-a,vm=":    1800,
		"container=c,gpu=0,instance=,job_id=,kind=pod,namespace=ml,pod=p,uuid=GPU-a,vm=":    0,
		"container=,gpu=1,instance=1.2,job_id=43,kind=slurm,namespace=,pod=,uuid=GPU-b,vm=": 0,
		"container=,gpu=1,instance=,job_id=42,kind=slurm,namespace=,pod=,uuid=GPU-b,vm=":    12.5,
	}
	if len(secs) != len(wantSecs) {
		t.Fatalf("idle seconds %v, want %v", secs, wantSecs)
	}
	for k, w := range wantSecs {
		if g, ok := secs[k]; !ok || g != w {
			t.Errorf("idle seconds %s: %v (present %v), want %v", k, g, ok, w)
		}
	}
}

func key(m *dto.Metric) string {
	var s string
	for i, lp := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += lp.GetName() + "=" + lp.GetValue()
	}
	return s
}
