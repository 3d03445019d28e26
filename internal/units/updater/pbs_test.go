package updater

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// A PBS job's series (wattrace_pbs_job_*) are counted into a unit of kind
// pbs_job, summed over its nodes, with the user of its labels until qstat's
// description replaces it.
func TestPBSJobUnits(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	end := base.Add(20 * time.Minute)
	lbl := func(node string) map[string]string {
		return map[string]string{"__name__": "wattrace_pbs_job_energy_joules_total", "job_id": "12345.pbs01", "user": "alice", "uid": "1000",
			"instance": node + ":9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"}
	}
	a := counter(lbl("node01"), base, end, end, time.Time{}, 2)
	b := counter(lbl("node02"), base, end, end, time.Time{}, 3)
	vm := testenv.StartVictoriaMetrics(t)
	vm.Import(t, append(a.jsonl(), b.jsonl()...))

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
	if r := u.Cycle(ctx); r.Err != nil || r.New != 1 {
		t.Fatalf("cycle: %+v", r)
	}
	got, err := st.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindPBSJob, ID: "12345.pbs01"})
	if err != nil {
		t.Fatal(err)
	}
	want := a.increase() + b.increase()
	if math.Abs(got.Figures.Joules()-want) > 1e-6*want || got.User != "alice" || len(got.Nodes) != 2 {
		t.Errorf("pbs job: %v J (want %v), user %q, nodes %v", got.Figures.Joules(), want, got.User, got.Nodes)
	}
	// Without the pbs_job kind the updater does not read them.
	u2, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Kinds: []units.Kind{units.KindJob}, Now: func() time.Time { return now }}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := u2.levels[string(units.KindPBSJob)]; ok {
		t.Error("updater.kinds=job reads pbs_job series")
	}
}
