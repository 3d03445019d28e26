package updater

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// A cluster upgrading to Slurm 26.05 runs one job on a node whose cgroups
// are named by the job's SLUID (n1: the exporter labels the job by sluid
// alone until it finds the numeric id, then by both; the two are separate
// counters in the exporter) and on a node still on the job_<id> layout
// (n2). Whenever Slurm's metadata names the SLUID's job (before the
// series, while they run, after they end), the job is one unit, 123,
// whose energy is the sum of the three counters' increases, and no unit
// is left under the SLUID.
func TestSLUIDSeriesJoinTheirJob(t *testing.T) {
	const sluid = "sEKNKTV3WPV500"
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	lbl := func(node, jobID, sl string) map[string]string {
		m := map[string]string{"__name__": "wattrace_job_energy_joules_total", "user": "alice", "uid": "1000", "slurm_node": node,
			"instance": node + ":9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"}
		if jobID != "" {
			m["job_id"] = jobID
		}
		if sl != "" {
			m["sluid"] = sl
		}
		return m
	}
	// n1 under the SLUID alone for 10 min, then retained flat; under
	// both ids from 10 to 30 min; n2 under the id, 0 to 30 min.
	early := counter(lbl("n1", "", sluid), at(0), at(10), at(15), time.Time{}, 2)
	late := counter(lbl("n1", "123", sluid), at(10), at(30), at(35), time.Time{}, 3)
	other := counter(lbl("n2", "123", ""), at(0), at(30), at(35), time.Time{}, 5)
	truth := early.increase() + late.increase() + other.increase()
	vm := testenv.StartVictoriaMetrics(t)
	vm.Import(t, append(append(early.jsonl(), late.jsonl()...), other.jsonl()...))

	for _, tc := range []struct {
		name string
		meta int // minute at which Slurm's metadata is read
	}{{"metadata first", 0}, {"metadata while running", 7}, {"metadata at the switch", 12}, {"metadata after the end", 50}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, now, clock := clockedStore(t)
			u, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Lookback: 2 * time.Minute, Delay: time.Second, Now: clock}, nil)
			if err != nil {
				t.Fatal(err)
			}
			job := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "123", SLUID: sluid, User: "alice", Project: "proj_a",
				State: "RUNNING", Start: at(0)}
			for m := 1; m <= 55; m++ {
				*now = at(m).Add(3 * time.Second)
				if m == tc.meta || (tc.meta == 0 && m == 1) {
					if err := st.UpsertJobs(ctx, "slurm", *now, []units.Unit{job}); err != nil {
						t.Fatal(err)
					}
				}
				if r := u.Cycle(ctx); r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			got, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: "123"})
			if err != nil {
				t.Fatal(err)
			}
			if j := got.Figures.Joules(); math.Abs(j-truth) > 1e-6*truth || got.Project != "proj_a" || len(got.Nodes) != 2 {
				t.Errorf("job 123: %v J in %q on %v; want %v J, the three counters' increase, in proj_a on n1, n2", j, got.Project, got.Nodes, truth)
			}
			if _, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: sluid}); !errors.Is(err, units.ErrNotFound) {
				t.Errorf("a unit is left under the SLUID: %v", err)
			}
		})
	}
}

// A SLUID that Slurm's metadata gives to two jobs is refused, and so is a
// sluid label that is not one (a value from outside, which would become a
// unit id).
func TestSLUIDRefused(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "units.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "1", SLUID: "sEKNKTV3WPV500", User: "alice"}
	b := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "2", SLUID: "sEKNKTV3WPV500", User: "mallory"}
	if err := st.UpsertJobs(ctx, "slurm", time.Now(), []units.Unit{a}); err != nil {
		t.Fatal(err)
	}
	if err := st.UpsertJobs(ctx, "slurm", time.Now(), []units.Unit{b}); err == nil {
		t.Error("a second job took the SLUID of job 1")
	}
	if m, err := st.Aliases(ctx, "c1", units.KindJob, []string{"sEKNKTV3WPV500"}); err != nil || m["sEKNKTV3WPV500"] != "1" {
		t.Errorf("aliases %v, %v; want job 1", m, err)
	}
	if aliasOf(levels[3], model.Metric{"sluid": "../../x"}) != "" {
		t.Error("a sluid label that is no SLUID names a unit")
	}
}

// On a 26.05 node with CgroupJobIdPaths=yes the exporter learns the job's
// sluid with its owner, after the job's first series: the counter goes on
// under the new labels and is counted once.
func TestSLUIDFilledInLater(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-2 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	labels := map[string]string{"__name__": "wattrace_job_energy_joules_total", "job_id": "125", "slurm_node": "n1",
		"instance": "n1:9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"}
	value := func(t time.Time) float64 { return 4 + 2*t.Sub(at(0)).Seconds() }
	var before, after series
	before.labels = labels
	after.labels = with(labels, "user", "alice", "uid", "1000", "sluid", "sEKNKTV3WPV600")
	changed := at(5).Add(7 * time.Second)
	for ts := at(0); !ts.After(at(20)); ts = ts.Add(15 * time.Second) {
		if ts.Before(changed) {
			before.ts, before.vs = append(before.ts, ts.UnixMilli()), append(before.vs, value(ts))
			continue
		}
		if !ts.After(at(10)) { // retained, flat
			before.ts, before.vs = append(before.ts, ts.UnixMilli()), append(before.vs, value(changed.Add(-7*time.Second)))
		}
		after.ts, after.vs = append(after.ts, ts.UnixMilli()), append(after.vs, value(ts))
	}
	vm := testenv.StartVictoriaMetrics(t)
	vm.Import(t, append(before.jsonl(), after.jsonl()...))
	ctx := context.Background()
	st, now, clock := clockedStore(t)
	u, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Lookback: 2 * time.Minute, Delay: time.Second, Now: clock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for m := 1; m <= 25; m++ {
		*now = at(m).Add(3 * time.Second)
		if r := u.Cycle(ctx); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	got, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: "125"})
	if err != nil {
		t.Fatal(err)
	}
	if truth := value(at(20)); math.Abs(got.Figures.Joules()-truth) > 1e-6*truth {
		t.Errorf("job 125: %v J, the counter grew by %v J", got.Figures.Joules(), truth)
	}
}
