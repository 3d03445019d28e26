package updater

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// wattrace_gpu_allocation_idle_seconds_total of a Slurm job, per GPU,
// counts into the job's GPUIdleSeconds: each series' exact increase (a
// reset on one GPU counts from 0), summed over the GPUs, beside the job's
// energy. A pod holder's series (no pod_uid) and a VM's are not read, and
// the GPU series add no node (the job's own series name it).
func TestGPUIdleSecondsUnits(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	end := base.Add(20 * time.Minute)
	gpu := func(idx, uuid, kind, job string) map[string]string {
		return map[string]string{"__name__": "wattrace_gpu_allocation_idle_seconds_total", "gpu": idx, "uuid": uuid, "exported_instance": "",
			"kind": kind, "job_id": job, "namespace": "", "pod": "", "container": "", "vm": "", "instance": "gpu01:9841", "job": "wattrace"}
	}
	// Job 300 holds GPU 0 idle all along (1 s a second) and uses GPU 1
	// (0); GPU 2 idle at half the time, reset by an exporter restart.
	g0 := counter(gpu("0", "GPU-a", "slurm", "300"), base, end, end, time.Time{}, 1)
	g1 := counter(gpu("1", "GPU-b", "slurm", "300"), base, end, end, time.Time{}, 0)
	g2 := counter(gpu("2", "GPU-c", "slurm", "300"), base, end, end, base.Add(10*time.Minute), 0.5)
	pod := gpu("3", "GPU-d", "pod", "")
	pod["namespace"], pod["pod"], pod["container"] = "ml", "p", "c"
	p := counter(pod, base, end, end, time.Time{}, 1)
	energy := counter(map[string]string{"__name__": "wattrace_job_energy_joules_total", "job_id": "300", "user": "alice", "uid": "1000",
		"slurm_node": "gpu01", "instance": "gpu01:9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"},
		base, end, end, time.Time{}, 5)
	vm := testenv.StartVictoriaMetrics(t)
	var body []byte
	for _, s := range []series{g0, g1, g2, p, energy} {
		body = append(body, s.jsonl()...)
	}
	vm.Import(t, body)

	ctx := context.Background()
	now := end.Add(2 * time.Minute)
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "units.db"), Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	u, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Lookback: time.Hour, Delay: time.Second, Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := u.Cycle(ctx); r.Err != nil || r.New != 1 || r.Queries != 6 {
		t.Fatalf("cycle: %+v", r)
	}
	got, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: "300"})
	if err != nil {
		t.Fatal(err)
	}
	want := g0.increase() + g1.increase() + g2.increase()
	if want < 1500 || !near(got.Figures.GPUIdleSeconds, want) || !near(got.Figures.Joules(), energy.increase()) {
		t.Errorf("job 300: %v s held idle (want %v), %v J (want %v)", got.Figures.GPUIdleSeconds, want, got.Figures.Joules(), energy.increase())
	}
	if len(got.Nodes) != 1 || got.Nodes[0] != "gpu01" {
		t.Errorf("nodes %v, want the job series' slurm_node only", got.Nodes)
	}
	all, err := st.Units(ctx, units.Filter{Limit: 10})
	if err != nil || len(all) != 1 {
		t.Errorf("units %+v %v: want job 300 alone", all, err)
	}
	// Without the job kind the GPU family is not asked.
	u2, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Kinds: []units.Kind{units.KindPod}, Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r := u2.Cycle(ctx); r.Err != nil || r.Queries != 5 {
		t.Errorf("pods only: %+v", r)
	}
}
