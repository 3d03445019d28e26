package api

import (
	"encoding/json"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/unitstest"
	"github.com/wattrace/wattrace/pkg/units"
)

// newScopeAPI is the test API over a real SQLite store holding us.
func newScopeAPI(t testing.TB, us []units.Unit) http.Handler {
	t.Helper()
	a, err := New(unitstest.Store(t, us), Config{
		Access: Access{
			UserHeader:      DefaultUserHeader,
			TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			Admins:          []string{"carol"},
		},
		MaxRange:     31 * 24 * time.Hour,
		DefaultRange: 7 * 24 * time.Hour,
		Now:          func() time.Time { return testNow },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a.Handler()
}

type usageRow struct {
	Cluster, Kind, Project string
	Units                  int64
	Totals                 energyTotals
}

func usageOf(t *testing.T, h http.Handler, q, user string) []usageRow {
	t.Helper()
	a := get(t, h, "/api/v1/usage?"+q, user, trusted)
	if a.code != 200 {
		t.Fatalf("%s as %s: %d %s", q, user, a.code, a.body)
	}
	var rs []usageRow
	if err := json.Unmarshal(a.env.Data, &rs); err != nil {
		t.Fatal(err)
	}
	return rs
}

// A project is a name on one cluster: alice is in proj_a on c1, and a
// namespace proj_a of another cluster (c2), with dave's job and a pod in
// it, is not hers to see, however she asks.
func TestUsageProjectMembershipIsPerCluster(t *testing.T) {
	t0 := testNow.Add(-6 * time.Hour)
	joules := func(j float64) units.Figures {
		return units.Figures{Energy: []units.ZoneEnergy{{Zone: "package", Method: "measured", Joules: j}}, CPUSeconds: j / 100}
	}
	us := append(fixture(),
		units.Unit{Cluster: "c2", Kind: units.KindJob, ID: "901", User: "dave", Project: "proj_a", State: "COMPLETED",
			Start: t0, End: t0.Add(time.Hour), Figures: joules(500000), Status: units.StatusFinal},
		units.Unit{Cluster: "c2", Kind: units.KindPod, ID: "p-9", Name: "web", Project: "proj_a", State: "RUNNING",
			Start: t0, Figures: joules(250000), Status: units.StatusRunning},
	)
	h := newScopeAPI(t, us)
	// proj_a on c1: alice's 101 (39,600 J) and 102 (7,920 J), carol's
	// 301 (3,960 J); package plus dram, the fixture's dram a tenth.
	const c1 = 39600 + 7920 + 3960
	for _, q := range []string{
		"project=proj_a",
		"project=proj_a&cluster=c1,c2",
		"project=proj_a&cluster=c1&cluster=c2",
		"project=proj_a&by=cluster,kind",
		"project=proj_a&cluster=c1,c2&by=cluster,kind",
	} {
		rs := usageOf(t, h, q, "alice")
		if len(rs) != 1 || rs[0].Units != 3 || !near(rs[0].Totals.Joules, c1) {
			t.Errorf("%s as alice: %+v, want one bucket of 3 units and %d J (c1 only)", q, rs, c1)
			continue
		}
		if rs[0].Cluster != "" && (rs[0].Cluster != "c1" || rs[0].Kind != "job") {
			t.Errorf("%s as alice: bucket %s/%s, want c1/job", q, rs[0].Cluster, rs[0].Kind)
		}
	}
	// Naming c2 alone is asking for a project she is not in.
	if a := get(t, h, "/api/v1/usage?project=proj_a&cluster=c2", "alice", trusted); a.code != 403 {
		t.Errorf("proj_a on c2 as alice: %d %s, want 403", a.code, a.body)
	}
	// The admin sees both clusters' proj_a.
	got := map[string]float64{}
	for _, r := range usageOf(t, h, "project=proj_a&by=cluster", "carol") {
		got[r.Cluster] += r.Totals.Joules
	}
	if len(got) != 2 || !near(got["c1"], c1) || !near(got["c2"], 750000) {
		t.Errorf("proj_a by cluster as carol: %v, want c1 %d J and c2 750000 J", got, c1)
	}
	// Her projects and users lists name c1 only.
	a := get(t, h, "/api/v1/projects?project=proj_a", "alice", trusted)
	var ps []units.Project
	if err := json.Unmarshal(a.env.Data, &ps); err != nil || a.code != 200 {
		t.Fatalf("%d %s", a.code, a.body)
	}
	if len(ps) != 1 || ps[0].Cluster != "c1" {
		t.Errorf("alice's projects %+v, want proj_a on c1 only", ps)
	}
}

func near(a, b float64) bool {
	d := a - b
	return d <= 1e-6*b && d >= -1e-6*b
}

// Usage sums the units that started in the range asked, and says which
// range it summed: 07:30-08:30 is alice's job 102 (started 08:00, 7,920
// J), not the day's 71,280 J.
func TestUsageExactRange(t *testing.T) {
	h := newScopeAPI(t, fixture())
	from, to := testNow.Add(-270*time.Minute), testNow.Add(-210*time.Minute)
	for _, period := range []string{"total", "day", "month"} {
		a := get(t, h, "/api/v1/usage?period="+period+"&from="+from.Format(time.RFC3339)+"&to="+to.Format(time.RFC3339), "carol", trusted)
		if a.code != 200 {
			t.Fatalf("%d %s", a.code, a.body)
		}
		var rs []struct {
			From, To time.Time
			Units    int64
			Totals   energyTotals
		}
		if err := json.Unmarshal(a.env.Data, &rs); err != nil {
			t.Fatal(err)
		}
		if len(rs) != 1 || rs[0].Units != 1 || !near(rs[0].Totals.Joules, 7920) || !rs[0].From.Equal(from) || !rs[0].To.Equal(to) {
			t.Errorf("period %s, 07:30-08:30: %+v, want 1 unit, 7920 J, from %v to %v", period, rs, from, to)
		}
	}
}
