// Package unitstest gives the units API's and acct's tests a store holding
// given units.
package unitstest

import (
	"context"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// memStore is a stand-in until the SQLite store lands (then replaced by it).
type memStore struct{ us []units.Unit }

// Store returns a store holding us.
func Store(t testing.TB, us []units.Unit) units.Reader { return &memStore{us: us} }

func in[T comparable](list []T, v T) bool { return len(list) == 0 || slices.Contains(list, v) }

func (m *memStore) Units(_ context.Context, f units.Filter) ([]units.Unit, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var out []units.Unit
	for _, u := range m.us {
		if !in(f.Users, u.User) || !in(f.Projects, u.Project) || !in(f.Clusters, u.Cluster) || !in(f.Kinds, u.Kind) || !in(f.IDs, u.ID) {
			continue
		}
		if !f.To.IsZero() && !u.Start.Before(f.To) || !f.From.IsZero() && !u.End.IsZero() && u.End.Before(f.From) {
			continue
		}
		if f.Running != nil && *f.Running != u.End.IsZero() {
			continue
		}
		out = append(out, u)
	}
	return out, nil
}

func (m *memStore) Unit(_ context.Context, k units.Key) (units.Unit, error) {
	for _, u := range m.us {
		if u.ID == k.ID {
			return u, nil
		}
	}
	return units.Unit{}, units.ErrNotFound
}

func (m *memStore) Usage(_ context.Context, q units.UsageQuery) ([]units.Usage, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	groups := map[[2]string]*units.Usage{}
	for _, u := range m.us {
		if !in(q.Users, u.User) || !in(q.Projects, u.Project) {
			continue
		}
		var k [2]string
		if slices.Contains(q.By, units.ByUser) {
			k[0] = u.User
		}
		if slices.Contains(q.By, units.ByProject) {
			k[1] = u.Project
		}
		g := groups[k]
		if g == nil {
			g = &units.Usage{User: k[0], Project: k[1]}
			groups[k] = g
		}
		g.Units++
		g.Figures.CPUSeconds += u.Figures.CPUSeconds
	}
	var out []units.Usage
	for _, g := range groups {
		out = append(out, *g)
	}
	return out, nil
}

func (m *memStore) members(mb units.Membership) map[[2]string]bool {
	s := map[[2]string]bool{}
	for _, u := range m.us {
		if in(mb.Users, u.User) && in(mb.Projects, u.Project) {
			s[[2]string{u.User, u.Project}] = true
		}
	}
	return s
}

func (m *memStore) Projects(_ context.Context, mb units.Membership) ([]units.Project, error) {
	ps := map[string][]string{}
	for k := range m.members(mb) {
		ps[k[1]] = append(ps[k[1]], k[0])
	}
	var out []units.Project
	for p, us := range ps {
		sort.Strings(us)
		out = append(out, units.Project{Name: p, Users: us})
	}
	return out, nil
}

func (m *memStore) Users(_ context.Context, mb units.Membership) ([]units.User, error) {
	us := map[string][]string{}
	for k := range m.members(mb) {
		us[k[0]] = append(us[k[0]], k[1])
	}
	var out []units.User
	for u, ps := range us {
		out = append(out, units.User{Name: u, Projects: ps})
	}
	return out, nil
}

func (m *memStore) Owned(_ context.Context, user string, keys []units.Key) (bool, error) {
	for _, k := range keys {
		u, err := m.Unit(context.Background(), k)
		if err != nil || u.User != user {
			return false, nil
		}
	}
	return true, nil
}

func (m *memStore) Ping(context.Context) error { return nil }

// Fixture: alice runs jobs 101 (ended) and 102 (running) in proj_a, bob
// 201 in proj_b, carol 301 in proj_a; carol is an admin.
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
			Start: t0, End: t0.Add(time.Hour), Figures: energy(36000), Status: units.StatusFinal, Nodes: []string{"n1"}},
		{Cluster: "c1", Kind: units.KindJob, ID: "102", Name: "long", User: "alice", Project: "proj_a", State: "RUNNING",
			Start: t0.Add(2 * time.Hour), Figures: energy(7200), Status: units.StatusRunning, Nodes: []string{"n1"}},
		{Cluster: "c1", Kind: units.KindJob, ID: "201", Name: "bobs", User: "bob", Project: "proj_b", State: "CANCELLED",
			Start: t0.Add(time.Hour), End: t0.Add(90 * time.Minute), Figures: energy(18000), Status: units.StatusFinal, Nodes: []string{"n1"}},
		{Cluster: "c1", Kind: units.KindJob, ID: "301", Name: "carols", User: "carol", Project: "proj_a", State: "COMPLETED",
			Start: t0.Add(3 * time.Hour), End: t0.Add(4 * time.Hour), Figures: energy(3600), Status: units.StatusFinal, Nodes: []string{"n1"}},
	}
}
