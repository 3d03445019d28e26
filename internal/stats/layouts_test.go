package stats

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/workload/workloadtest"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// On every fixture node of the batch systems' layouts (workloadtest), each
// job is found with its labels and every cgroup of it, no job's energy is
// left on the node, and the node's energy is conserved: the jobs, the
// cgroups of no job, idle and unattributed add up to what the meter read.
func TestBatchLayoutsConserveEnergy(t *testing.T) {
	for _, n := range workloadtest.Nodes() {
		t.Run(n.Name, func(t *testing.T) {
			cg, proc, etc := workloadtest.Write(t, t.TempDir(), n)
			res := workload.NewResolver(workload.Options{ProcRoot: proc, EtcRoot: etc, CgroupRoot: cg, LibvirtDirs: []string{}})
			paths := names{}
			for i, c := range n.Cgroups {
				paths[uint64(i+1)] = c.Path
			}
			src := &fakeSource{}
			m := &fakeMeter{samples: []reading.ZoneSample{{Zone: "package", Socket: 0}}}
			l, err := New(Config{Interval: time.Second, Retention: 10 * time.Second, IdlePolicy: "none", CPUs: 8,
				IdleWatts: map[string]float64{"package": 5}}, src, m, paths, nil, WithWorkloads(res, ident.Levels()))
			if err != nil {
				t.Fatal(err)
			}
			t0 := time.Unix(0, 0)
			for id := range paths {
				src.add(id, uint32(id), 0, 0)
			}
			l.Step(t0)
			for id := range paths {
				src.add(id, uint32(id), 0, id*1e8)
			}
			m.samples[0].Joules = 100
			l.Step(t0.Add(time.Second))
			s := l.Snapshot()

			z := s.Zones[0]
			var inJobs, outside float64
			jobCgroups := map[string]bool{}
			for _, j := range n.Jobs {
				var w snapshot.Workload
				for _, u := range s.Workloads {
					if u.Level == j.Level && strings.Join(u.Labels, ",") == strings.Join(j.Labels, ",") {
						w = u
					}
				}
				if w.Level == "" {
					t.Fatalf("no %s workload %q among %+v", j.Level, j.Labels, s.Workloads)
				}
				if w.Cgroups != j.Cgroups {
					t.Errorf("%s %q: %d cgroups, want %d", j.Level, j.Labels, w.Cgroups, j.Cgroups)
				}
				e := w.Energy.Get("package")
				if e.DynamicJ <= 0 {
					t.Errorf("%s %q: no energy", j.Level, j.Labels)
				}
				inJobs += e.DynamicJ + e.IdleJ
			}
			for _, c := range s.Cgroups {
				id := res.Resolve(c.Cgroup)
				job := false
				for _, j := range n.Jobs {
					if vals, ok := id.LabelValues(ident.Kind(j.Level)); ok && strings.Join(vals, ",") == strings.Join(j.Labels, ",") {
						job = true
					}
				}
				if job {
					jobCgroups[c.Cgroup] = true
				} else {
					outside += c.Energy.Get("package").DynamicJ + c.Energy.Get("package").IdleJ
				}
			}
			if got := inJobs + outside + z.IdleJ + z.UnattributedJ; math.Abs(got-z.EnergyJ) > 1e-9*z.EnergyJ || z.EnergyJ != 100 {
				t.Errorf("jobs %v + other cgroups %v + idle %v + unattributed %v = %v, node %v", inJobs, outside, z.IdleJ, z.UnattributedJ, got, z.EnergyJ)
			}
			want := 0
			for _, j := range n.Jobs {
				want += j.Cgroups
			}
			if len(jobCgroups) != want {
				t.Errorf("%d cgroups in jobs, want %d", len(jobCgroups), want)
			}
		})
	}
}
