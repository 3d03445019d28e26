package updater

import (
	"context"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/units"
)

// After a catch-up a running unit is running, and a job Slurm describes
// that the TSDB never showed stays pending with no figures. The tail of a
// catch-up is a window shorter than the scrape interval: a running unit
// may have no sample in it, which must not end it.
func TestStatusAfterCatchUp(t *testing.T) {
	base := time.Now().UTC().Truncate(time.Minute).Add(-3 * time.Hour)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	pod := counter(map[string]string{"__name__": "wattrace_pod_energy_joules_total", "pod_uid": "p-2", "pod": "db",
		"namespace": "shop", "instance": "n1:9841", "job": "wattrace", "zone": "package", "source": "rapl", "method": "measured", "mode": "dynamic"},
		at(0), at(170), at(170), time.Time{}, 2)
	vm := testenv.StartVictoriaMetrics(t)
	vm.Import(t, pod.jsonl())

	ctx := context.Background()
	st, now, clock := clockedStore(t)
	*now = at(1).Add(20 * time.Second)
	job := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "555", User: "alice", Project: "proj_a", State: "COMPLETED",
		Start: at(0), End: at(30)}
	if err := st.UpsertJobs(ctx, "slurm", *now, []units.Unit{job}); err != nil {
		t.Fatal(err)
	}
	u, err := New(newQuerier(t, vm.URL), st, Config{Cluster: "c1", Lookback: 2 * time.Minute, Delay: time.Second, Now: clock}, nil)
	if err != nil {
		t.Fatal(err)
	}
	unit := func(id string) units.Unit {
		t.Helper()
		un, err := st.Unit(ctx, units.Key{Cluster: "c1", ID: id})
		if err != nil {
			t.Fatal(err)
		}
		return un
	}
	cycle := func() Result {
		t.Helper()
		r := u.Cycle(ctx)
		if r.Err != nil {
			t.Fatalf("cycle at %v: %v", *now, r.Err)
		}
		return r
	}
	checkJob := func(when string) {
		t.Helper()
		if j := unit("555"); j.Status != units.StatusPending || j.Figures.Joules() != 0 || j.State != "COMPLETED" {
			t.Errorf("%s: Slurm-only job 555 is %s with %v J (state %s), want pending with no figures", when, j.Status, j.Figures.Joules(), j.State)
		}
	}
	cycle()
	if p := unit("p-2"); p.Status != units.StatusRunning {
		t.Fatalf("pod after the first cycle: %s", p.Status)
	}
	checkJob("after the first cycle")
	// The TSDB is down for an hour: the pod is pending.
	vm.Stop()
	*now = at(2)
	if r := u.Cycle(ctx); r.Err == nil {
		t.Fatal("a cycle with the TSDB down succeeded")
	}
	if p := unit("p-2"); p.Status != units.StatusPending {
		t.Fatalf("pod while the TSDB is down: %s", p.Status)
	}
	vm.Start()
	// Back: the first cycle reads an hour (MaxWindow), the second the
	// 10 s left, (base+3679 s, base+3689 s], between two scrapes (every
	// 15 s from base).
	*now = at(61).Add(30 * time.Second)
	if r := cycle(); r.CaughtUp || r.Running != 1 {
		t.Fatalf("catch-up step: %+v", r)
	}
	r := cycle()
	if !r.CaughtUp || r.End.Sub(r.Start) != 10*time.Second || r.Samples != 0 {
		t.Fatalf("catch-up tail: %+v", r)
	}
	p := unit("p-2")
	if want := pod.increaseUntil(at(61).Add(29 * time.Second).UnixMilli()); p.Status != units.StatusRunning || !near(p.Figures.Joules(), want) || !p.End.IsZero() {
		t.Errorf("pod after the catch-up: %s, %v J, end %v; want running, %v J, no end", p.Status, p.Figures.Joules(), p.End, want)
	}
	checkJob("after the catch-up")
	// The pod goes on, then its series stop (at 170 min): final once
	// no sample came for longer than a running unit goes without one.
	for m := 62; m <= 175; m++ {
		*now = at(m)
		cycle()
		if p := unit("p-2"); m < 171 && p.Status != units.StatusRunning {
			t.Fatalf("pod at %d min: %s", m, p.Status)
		}
	}
	if p := unit("p-2"); p.Status != units.StatusFinal || !near(p.Figures.Joules(), pod.increase()) || !p.End.Equal(at(170)) {
		t.Errorf("pod after it ended: %s, %v J, end %v; want final, %v J, end %v", p.Status, p.Figures.Joules(), p.End, pod.increase(), at(170))
	}
	checkJob("at the end")
}
