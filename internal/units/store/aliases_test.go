package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// A unit counted under a SLUID is folded into its job when Slurm names it:
// figures, nodes and series state move, the usage rollup moves with them,
// and a later observation under the SLUID goes to the job, its series
// merged newest first. On both backends.
func TestAliasFold(t *testing.T) {
	const sluid = "sEKNKTV3WPV500"
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			t0 := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
			s := open(t, func() time.Time { return t0 })
			job := func(id string) units.Key { return units.Key{Cluster: "c1", Kind: units.KindJob, ID: id} }
			energy := func(j float64) units.Figures {
				return units.Figures{Energy: []units.ZoneEnergy{{Zone: "package", Method: "measured", Joules: j}}, CPUSeconds: j / 10}
			}
			obs := []Observation{
				{Key: job(sluid), User: "alice", Nodes: []string{"n1"}, First: t0, Last: t0.Add(time.Minute), Delta: energy(100),
					Series: map[string]SeriesState{"a": {V: 100, T: t0.Add(time.Minute).UnixMilli()}}, Status: units.StatusRunning},
				{Key: job("123"), User: "alice", Nodes: []string{"n2"}, First: t0, Last: t0.Add(time.Minute), Delta: energy(50),
					Series: map[string]SeriesState{"b": {V: 50, T: t0.Add(time.Minute).UnixMilli()}}, Status: units.StatusRunning},
			}
			if err := s.ApplyCycle(ctx, "tsdb", t0.Add(time.Minute), obs); err != nil {
				t.Fatal(err)
			}
			meta := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "123", SLUID: sluid, User: "alice", Project: "p", State: "RUNNING", Start: t0}
			if err := s.UpsertJobs(ctx, "slurm", t0.Add(2*time.Minute), []units.Unit{meta}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Unit(ctx, job(sluid)); !errors.Is(err, units.ErrNotFound) {
				t.Fatalf("unit under the SLUID: %v", err)
			}
			u, err := s.Unit(ctx, job("123"))
			if err != nil || u.Figures.Joules() != 150 || len(u.Nodes) != 2 || u.Status != units.StatusRunning {
				t.Fatalf("job after the fold: %+v, %v", u, err)
			}
			tr, err := s.Lookup(ctx, []units.Key{job("123")})
			if err != nil || len(tr) != 1 || len(tr[0].Series) != 2 {
				t.Fatalf("series after the fold: %+v, %v", tr, err)
			}
			// An observation made from the SLUID unit's state before the
			// fold (the updater's window raced the metadata).
			late := []Observation{{Key: job(sluid), Delta: energy(10), Last: t0.Add(3 * time.Minute),
				Series: map[string]SeriesState{"a": {V: 110, T: t0.Add(3 * time.Minute).UnixMilli()}}, Status: units.StatusRunning}}
			if err := s.ApplyCycle(ctx, "tsdb", t0.Add(3*time.Minute), late); err != nil {
				t.Fatal(err)
			}
			tr, err = s.Lookup(ctx, []units.Key{job("123")})
			if err != nil || len(tr) != 1 || tr[0].Series["a"].V != 110 || tr[0].Series["b"].V != 50 {
				t.Fatalf("series after the redirect: %+v, %v", tr, err)
			}
			if u, _ := s.Unit(ctx, job("123")); u.Figures.Joules() != 160 {
				t.Errorf("job after the redirect: %v J, want 160", u.Figures.Joules())
			}
			usage, err := s.Usage(ctx, units.UsageQuery{From: t0.Add(-time.Hour), To: t0.Add(time.Hour), Kinds: []units.Kind{units.KindJob}})
			if err != nil || len(usage) != 1 || usage[0].Units != 1 || usage[0].Figures.Joules() != 160 {
				t.Errorf("usage: %+v, %v; want one unit of 160 J", usage, err)
			}
		})
	}
}
