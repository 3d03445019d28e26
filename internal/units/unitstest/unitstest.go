// Package unitstest gives the units API's and acct's tests a real store
// (SQLite in a temporary directory) holding given units.
package unitstest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// Store returns a SQLite store holding us: each unit described as a
// manager connector would (UpsertJobs) and its figures counted in one
// update cycle (ApplyCycle), as the updater writes them.
func Store(t testing.TB, us []units.Unit) *store.Store {
	t.Helper()
	ctx := context.Background()
	s, err := store.Open(ctx, store.Config{Path: filepath.Join(t.TempDir(), "units.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if len(us) == 0 {
		return s
	}
	at := time.Now()
	if err := s.UpsertJobs(ctx, "unitstest-meta", at, us); err != nil {
		t.Fatal(err)
	}
	obs := make([]store.Observation, 0, len(us))
	for _, u := range us {
		last := u.End
		if last.IsZero() {
			last = u.Start.Add(time.Minute)
		}
		obs = append(obs, store.Observation{Key: u.Key(), Nodes: u.Nodes, First: u.Start, Last: last, Delta: u.Figures, Status: u.Status})
	}
	if err := s.ApplyCycle(ctx, "unitstest", at, obs); err != nil {
		t.Fatal(err)
	}
	return s
}

// Fixture: alice runs jobs 101 (ended) and 102 (running) in proj_a, bob
// 201 in proj_b, carol 301 in proj_a; carol is an admin. Job 101 held two
// GPUs for its hour and left one idle for half of it (1800 s held idle).
func Fixture(now time.Time) []units.Unit {
	t0 := now.Add(-6 * time.Hour)
	energy := func(j float64) units.Figures {
		return units.Figures{
			Energy:     []units.ZoneEnergy{{Zone: "package", Method: "measured", Joules: j}, {Zone: "dram", Method: "measured", Joules: j / 10}},
			Emissions:  []units.Emission{{Zone: "package", Provider: "constant", Grams: j / 3.6e6 * 50}},
			CPUSeconds: j / 10,
		}
	}
	return []units.Unit{
		{Cluster: "c1", Kind: units.KindJob, ID: "101", Name: "multi", User: "alice", Project: "proj_a", State: "COMPLETED",
			Start: t0, End: t0.Add(time.Hour), Figures: gpuIdle(energy(36000), 1800), Status: units.StatusFinal, Nodes: []string{"n1"},
			Allocation: units.Allocation{GPUs: 2}},
		{Cluster: "c1", Kind: units.KindJob, ID: "102", Name: "long", User: "alice", Project: "proj_a", State: "RUNNING",
			Start: t0.Add(2 * time.Hour), Figures: energy(7200), Status: units.StatusRunning, Nodes: []string{"n1"}},
		{Cluster: "c1", Kind: units.KindJob, ID: "201", Name: "bobs", User: "bob", Project: "proj_b", State: "CANCELLED",
			Start: t0.Add(time.Hour), End: t0.Add(90 * time.Minute), Figures: energy(18000), Status: units.StatusFinal, Nodes: []string{"n1"}},
		{Cluster: "c1", Kind: units.KindJob, ID: "301", Name: "carols", User: "carol", Project: "proj_a", State: "COMPLETED",
			Start: t0.Add(3 * time.Hour), End: t0.Add(4 * time.Hour), Figures: energy(3600), Status: units.StatusFinal, Nodes: []string{"n1"}},
	}
}

func gpuIdle(f units.Figures, s float64) units.Figures {
	f.GPUIdleSeconds = s
	return f
}
