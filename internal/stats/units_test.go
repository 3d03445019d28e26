package stats

import (
	"io/fs"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

func unitBy(s *snapshot.Snapshot, level ident.Kind, id string) (snapshot.Workload, bool) {
	for _, u := range s.Workloads {
		if u.Level == string(level) && u.Labels[0] == id {
			return u, true
		}
	}
	return snapshot.Workload{}, false
}

// A Slurm job's steps and tasks roll up into one job; a container into its
// container and its pod; a unit's counters carry on when one of its cgroups
// leaves the snapshot before the others.
func TestUnitsRollUp(t *testing.T) {
	paths := names{
		1: "/slurm_n1/uid_0/job_42/step_0/task_0",
		2: "/slurm_n1/uid_0/job_42/step_batch",
		3: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b4c2c6e_1f2a_4b3c_9d8e_7f6a5b4c3d2e.slice/cri-containerd-" + "aaaa000000000000000000000000000000000000000000000000000000000000" + ".scope",
		4: "/system.slice/nginx.service",
	}
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	res := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: 10 * time.Second, IdlePolicy: "none", CPUs: 8,
		IdleWatts: map[string]float64{"package": 0}}, src, m, paths, nil, WithWorkloads(res, ident.Levels()))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(0, 0)
	for id := uint64(1); id <= 4; id++ {
		src.add(id, uint32(id), 0, 0)
	}
	l.Step(t0)
	src.add(1, 1, 0, 3e9)
	src.add(2, 2, 0, 1e9)
	src.add(3, 3, 0, 2e9)
	src.add(4, 4, 0, 2e9)
	m.samples[0].Joules = 80
	l.Step(t0.Add(time.Second))
	s := l.Snapshot()
	job, ok := unitBy(s, ident.KindJob, "42")
	if !ok || job.CPUSeconds != 4 || job.Energy.Get("package").DynamicJ != 40 || job.Cgroups != 2 || !job.Alive {
		t.Fatalf("job 42: %+v (found %v)", job, ok)
	}
	if job.Labels[2] != "0" || job.Labels[3] != "n1" {
		t.Errorf("job labels %v, want uid 0 on slurm node n1", job.Labels)
	}
	pod, ok := unitBy(s, ident.KindPod, "0b4c2c6e-1f2a-4b3c-9d8e-7f6a5b4c3d2e")
	if !ok || pod.CPUSeconds != 2 || pod.Energy.Get("package").DynamicJ != 20 {
		t.Errorf("pod: %+v (found %v)", pod, ok)
	}
	if c, ok := unitBy(s, ident.KindContainer, "aaaa000000000000000000000000000000000000000000000000000000000000"); !ok || c.CPUSeconds != 2 {
		t.Errorf("container: %+v (found %v)", c, ok)
	}
	if u, ok := unitBy(s, ident.KindSystemdUnit, "nginx.service"); !ok || u.CPUSeconds != 2 || u.Labels[1] != "systemd" {
		t.Errorf("unit: %+v (found %v)", u, ok)
	}

	// The batch step ends and its cgroup leaves the snapshot; the job
	// goes on and its counters keep growing from where they were.
	delete(paths, 2)
	src.r.Cgroups = append(src.r.Cgroups[:1], src.r.Cgroups[2:]...)
	src.add(1, 1, 0, 1e9)
	m.samples[0].Joules = 90
	l.Step(t0.Add(20 * time.Second))
	job, _ = unitBy(l.Snapshot(), ident.KindJob, "42")
	if job.CPUSeconds != 5 || job.Energy.Get("package").DynamicJ != 50 || job.Cgroups != 1 {
		t.Errorf("job after its batch step left: %+v", job)
	}
}

type fakeResources struct {
	m     map[string]reading.Resources
	reads int
}

func (f *fakeResources) ReadInto(rel string, s *reading.Resources) error {
	f.reads++
	st, ok := f.m[rel]
	if !ok {
		return fs.ErrNotExist
	}
	*s = st
	return nil
}

// A unit's resources come from its top cgroup (the job's job_N, not a
// task's cgroup), and a unit that ended keeps its last reading.
func TestUnitResources(t *testing.T) {
	paths := names{1: "/slurm_n1/uid_0/job_42/step_0/task_0"}
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	res := &fakeResources{m: map[string]reading.Resources{"/slurm_n1/uid_0/job_42": {MemoryCurrent: 1 << 20, Available: reading.FieldMemoryCurrent}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none"}, src, m, paths, nil,
		WithWorkloads(ids, []ident.Kind{ident.KindJob}), WithResources(res, 0))
	if err != nil {
		t.Fatal(err)
	}
	src.add(1, 1, 0, 1e9)
	l.Step(time.Unix(0, 0))
	if reads := res.reads; reads != 0 {
		t.Fatalf("the loop read cgroup resources %d times with nobody asking", reads)
	}
	job, r, ok := unitResources(l.Snapshot(), ident.KindJob, "42")
	if !ok || r == nil || r.MemoryCurrent != 1<<20 {
		t.Fatalf("job resources: %+v %+v", job, r)
	}
	// Concurrent and repeated scrapes of one snapshot share one reading.
	for range 3 {
		unitResources(l.Snapshot(), ident.KindJob, "42")
	}
	if res.reads != 1 {
		t.Errorf("%d reads for one snapshot, want 1", res.reads)
	}
	delete(res.m, "/slurm_n1/uid_0/job_42")
	delete(paths, 1)
	l.Step(time.Unix(1, 0))
	job, r, _ = unitResources(l.Snapshot(), ident.KindJob, "42")
	if job.Alive || r == nil || r.MemoryCurrent != 1<<20 {
		t.Errorf("ended job lost its last reading: %+v %+v", job, r)
	}
}

// unitResources finds a workload and its resources as a collector reads them.
func unitResources(s *snapshot.Snapshot, level ident.Kind, id string) (snapshot.Workload, *reading.Resources, bool) {
	for i, u := range s.Workloads {
		if u.Level == string(level) && u.Labels[0] == id {
			return u, s.WorkloadResources(i), true
		}
	}
	return snapshot.Workload{}, nil, false
}

// A step cgroup whose path can't be resolved on its first interval gets a
// placeholder; once resolved, its job receives that first interval too.
func TestUnitGetsPlaceholderInterval(t *testing.T) {
	paths := names{1: "/slurm_n1/uid_0/job_7/step_batch"}
	src := &fakeSource{}
	m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
	ids := workload.NewResolver(workload.Options{EtcRoot: t.TempDir(), ProcRoot: t.TempDir()})
	l, err := New(Config{Interval: time.Second, Retention: time.Minute, IdlePolicy: "none", IdleWatts: map[string]float64{"package": 0}},
		src, m, paths, nil, WithWorkloads(ids, []ident.Kind{ident.KindJob}))
	if err != nil {
		t.Fatal(err)
	}
	src.add(1, 1, 0, 0)
	l.Step(time.Unix(0, 0))
	src.add(2, 2, 0, 3e9) // step_0 appears, not yet resolvable
	src.add(1, 1, 0, 1e9)
	m.samples[0].Joules = 40
	l.Step(time.Unix(1, 0))
	paths[2] = "/slurm_n1/uid_0/job_7/step_0"
	src.add(2, 2, 0, 1e9)
	m.samples[0].Joules = 50
	l.Step(time.Unix(2, 0))
	job, ok := unitBy(l.Snapshot(), ident.KindJob, "7")
	if !ok || job.CPUSeconds != 5 || job.Energy.Get("package").DynamicJ != 50 {
		t.Errorf("job 7: %+v, want all 5 CPU-seconds and 50 J", job)
	}
}
