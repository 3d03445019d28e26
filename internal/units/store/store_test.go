package store

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/units"
)

// backends opens a fresh, empty store of each kind. PostgreSQL is one
// server for the whole test binary (started on first use), with a new
// database per store.
func backends(t *testing.T) map[string]func(t *testing.T, now func() time.Time) *Store {
	return map[string]func(t *testing.T, now func() time.Time) *Store{
		SQLite: func(t *testing.T, now func() time.Time) *Store {
			return openStore(t, Config{Driver: SQLite, Path: filepath.Join(t.TempDir(), "units.db"), Now: now})
		},
		Postgres: func(t *testing.T, now func() time.Time) *Store {
			return openStore(t, Config{Driver: Postgres, DSN: pgDatabase(t), Now: now})
		},
	}
}

func openStore(t *testing.T, c Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

var (
	pgOnce sync.Once
	pgDSN  string
	pgN    int
	pgMu   sync.Mutex
)

// TestMain stops the shared PostgreSQL server after all tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if pgStop != nil {
		pgStop()
	}
	os.Exit(code)
}

var pgStop func()

// pgDatabase creates a new database on the shared server and returns its DSN.
func pgDatabase(t *testing.T) string {
	t.Helper()
	pgOnce.Do(func() {
		ct := &cleanupTB{TB: t}
		pgDSN = testenv.Postgres(ct)
		pgStop = ct.run
	})
	if pgDSN == "" {
		t.Fatal("PostgreSQL did not start")
	}
	pgMu.Lock()
	pgN++
	name := "units_" + time.Now().Format("150405") + "_" + itoa(pgN)
	pgMu.Unlock()
	admin := openRaw(t, pgDSN)
	if _, err := admin.ExecContext(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	return replaceDB(pgDSN, name)
}

func TestMigrations(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, nil)
			v, err := s.Version(context.Background())
			if err != nil || v != 3 {
				t.Fatalf("version %d, %v; want 3", v, err)
			}
			// Migrating an up-to-date database changes nothing.
			if err := s.migrate(context.Background(), dialectOf(s.driver)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestOpenNeedsPath(t *testing.T) {
	if _, err := Open(context.Background(), Config{}); err == nil {
		t.Fatal("no error without a path")
	}
	if _, err := Open(context.Background(), Config{Driver: "mysql", Path: "x"}); err == nil {
		t.Fatal("no error for an unknown driver")
	}
	if _, err := Open(context.Background(), Config{Path: "/nonexistent/dir/units.db"}); err == nil {
		t.Fatal("no error for a missing directory")
	}
}

var t0 = time.Date(2026, 3, 10, 8, 0, 0, 0, time.UTC)

func energy(pkg, dram float64) units.Figures {
	return units.Figures{
		Energy:     []units.ZoneEnergy{{Zone: "package", Method: "measured", Joules: pkg}, {Zone: "dram", Method: "measured", Joules: dram}},
		Emissions:  []units.Emission{{Zone: "package", Provider: "constant", Grams: pkg / 10}, {Zone: "dram", Provider: "constant", Grams: dram / 10}},
		CPUSeconds: pkg / 2,
	}
}

func key(id string) units.Key { return units.Key{Cluster: "c1", Kind: units.KindJob, ID: id} }

func TestStoreSuite(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			now := t0.Add(time.Hour)
			clock := func() time.Time { return now }
			t.Run("Cycles", func(t *testing.T) { testCycles(t, open(t, clock)) })
			t.Run("Describe", func(t *testing.T) { testDescribe(t, open(t, clock)) })
			t.Run("Filters", func(t *testing.T) { testFilters(t, open(t, clock)) })
			t.Run("Usage", func(t *testing.T) { testUsage(t, open(t, clock)) })
			t.Run("UsageRange", func(t *testing.T) { testUsageRange(t, open(t, clock)) })
			t.Run("Access", func(t *testing.T) { testAccess(t, open(t, clock)) })
			t.Run("Pending", func(t *testing.T) { testPending(t, open(t, clock)) })
			t.Run("Prune", func(t *testing.T) { testPrune(t, open(t, clock)) })
		})
	}
}

// testCycles: a unit's figures over two cycles, its end, and a failed
// transaction, in that order on one store.
func testCycles(t *testing.T, s *Store) {
	ctx := context.Background()
	testCyclesRunning(ctx, t, s)
	testCyclesFinal(ctx, t, s)
	testCyclesRollback(ctx, t, s)
}

// testCyclesRunning: two cycles of unit 100 add up, in the unit and in
// the rollup, and the cursor and the open units follow.
func testCyclesRunning(ctx context.Context, t *testing.T, s *Store) {
	obs := []Observation{{
		Key: key("100"), User: "alice", Nodes: []string{"n1"}, First: t0, Last: t0.Add(time.Minute),
		Delta: energy(100, 20), Status: units.StatusRunning,
		Series: map[string]SeriesState{"a": {V: 100, T: t0.Add(time.Minute).UnixMilli()}},
	}}
	if err := s.ApplyCycle(ctx, "tsdb", t0.Add(time.Minute), obs); err != nil {
		t.Fatal(err)
	}
	obs[0].Delta = energy(50, 10)
	obs[0].Nodes = []string{"n2"}
	obs[0].First, obs[0].Last = t0.Add(2*time.Minute), t0.Add(3*time.Minute)
	obs[0].Series = map[string]SeriesState{"a": {V: 150, T: t0.Add(3 * time.Minute).UnixMilli()}}
	if err := s.ApplyCycle(ctx, "tsdb", t0.Add(3*time.Minute), obs); err != nil {
		t.Fatal(err)
	}
	u, err := s.Unit(ctx, units.Key{ID: "100"})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.Figures.Joules(); got != 180 {
		t.Errorf("joules %v, want 180 (150 package + 30 dram)", got)
	}
	if u.Figures.CPUSeconds != 75 || u.Figures.Grams("constant") != 18 {
		t.Errorf("cpu %v grams %v, want 75, 18", u.Figures.CPUSeconds, u.Figures.Grams(""))
	}
	if u.User != "alice" || u.State != StateRunning || u.Status != units.StatusRunning || !u.Start.Equal(t0) || !u.End.IsZero() {
		t.Errorf("unit %+v", u)
	}
	if len(u.Nodes) != 2 || u.Nodes[0] != "n1" || u.Nodes[1] != "n2" {
		t.Errorf("nodes %v", u.Nodes)
	}
	// The rollup follows each cycle's increase.
	us, err := s.Usage(ctx, units.UsageQuery{From: t0, To: t0.Add(time.Hour), Users: []string{"alice"}})
	if err != nil || len(us) != 1 || us[0].Figures.Joules() != 180 || us[0].Figures.CPUSeconds != 75 || us[0].Units != 1 {
		t.Errorf("usage after two cycles %+v %v, want 180 J, 75 s, 1 unit", us, err)
	}
	at, ok, err := s.Cursor(ctx, "tsdb")
	if err != nil || !ok || !at.Equal(t0.Add(3*time.Minute)) {
		t.Errorf("cursor %v %v %v", at, ok, err)
	}
	open, err := s.Open(ctx)
	if err != nil || len(open) != 1 || open[0].Series["a"].V != 150 {
		t.Fatalf("open %+v %v", open, err)
	}
}

// testCyclesFinal: unit 100 ends, final at its last sample, and is no
// longer open.
func testCyclesFinal(ctx context.Context, t *testing.T, s *Store) {
	// The unit ends: final, end at its last sample.
	if err := s.ApplyCycle(ctx, "tsdb", t0.Add(4*time.Minute), []Observation{{Key: key("100"), Status: units.StatusFinal}}); err != nil {
		t.Fatal(err)
	}
	u, _ := s.Unit(ctx, key("100"))
	if u.Status != units.StatusFinal || u.State != StateEnded || !u.End.Equal(t0.Add(3*time.Minute)) || u.Figures.Joules() != 180 {
		t.Errorf("final unit %+v", u)
	}
	if open, _ := s.Open(ctx); len(open) != 0 {
		t.Errorf("open after final: %v", open)
	}
	lk, err := s.Lookup(ctx, []units.Key{key("100"), key("nope")})
	if err != nil || len(lk) != 1 || lk[0].Series["a"].V != 150 {
		t.Errorf("lookup %+v %v", lk, err)
	}
}

// testCyclesRollback: a failed transaction leaves nothing.
func testCyclesRollback(ctx context.Context, t *testing.T, s *Store) {
	// A failed transaction leaves nothing: an invalid described unit
	// after a valid one rolls both back.
	err := s.UpsertJobs(ctx, "sacct", t0, []units.Unit{{Cluster: "c1", Kind: units.KindJob, ID: "200"}, {Kind: "bogus"}})
	if !errors.Is(err, units.ErrInvalid) {
		t.Fatalf("upsert of a bad unit: %v", err)
	}
	if _, err := s.Unit(ctx, key("200")); !errors.Is(err, units.ErrNotFound) {
		t.Errorf("rolled-back unit exists: %v", err)
	}
	if _, ok, _ := s.Cursor(ctx, "sacct"); ok {
		t.Error("cursor moved in a rolled-back transaction")
	}
}

func exitCode(v int) *int { return &v }

func testDescribe(t *testing.T, s *Store) {
	ctx := context.Background()
	// The TSDB saw the job first, with the exporter's user label.
	if err := s.ApplyCycle(ctx, "tsdb", t0, []Observation{{Key: key("7"), User: "alice", First: t0.Add(time.Minute), Last: t0.Add(11 * time.Minute),
		Delta: energy(1000, 0), Status: units.StatusRunning}}); err != nil {
		t.Fatal(err)
	}
	job := units.Unit{Cluster: "c1", Kind: units.KindJob, ID: "7", Name: "sim", User: "alice", Group: "users",
		Project: "proj_a", Partition: "debug", Nodes: []string{"node1"}, State: "COMPLETED",
		Submit: t0.Add(-time.Minute), Start: t0, End: t0.Add(10 * time.Minute),
		Allocation: units.Allocation{CPUs: 4, MemoryBytes: 1 << 30, GPUs: 1}, ExitCode: exitCode(0)}
	if err := s.UpsertJobs(ctx, "sacct", t0.Add(time.Hour), []units.Unit{job}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Unit(ctx, key("7"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Project != "proj_a" || u.State != "COMPLETED" || !u.Start.Equal(t0) || !u.End.Equal(t0.Add(10*time.Minute)) ||
		u.Allocation.CPUs != 4 || u.ExitCode == nil || *u.ExitCode != 0 || u.Group != "users" || u.Partition != "debug" {
		t.Errorf("described unit %+v", u)
	}
	if u.Figures.Joules() != 1000 || u.Status != units.StatusRunning {
		t.Errorf("describing changed figures or status: %+v", u)
	}
	if u.Figures.GPUSeconds != 600 {
		t.Errorf("gpu seconds %v, want 1 GPU × 600 s", u.Figures.GPUSeconds)
	}
	// Further TSDB cycles keep Slurm's description.
	if err := s.ApplyCycle(ctx, "tsdb", t0, []Observation{{Key: key("7"), User: "mallory", Project: "ns", Last: t0.Add(12 * time.Minute),
		Delta: energy(10, 0), Status: units.StatusFinal}}); err != nil {
		t.Fatal(err)
	}
	u, _ = s.Unit(ctx, key("7"))
	if u.User != "alice" || u.Project != "proj_a" || u.State != "COMPLETED" || !u.End.Equal(t0.Add(10*time.Minute)) || u.Figures.Joules() != 1010 {
		t.Errorf("after a TSDB cycle %+v", u)
	}
	// A job Slurm knows but the TSDB never showed is pending, with no figures.
	job2 := job
	job2.ID, job2.State, job2.End = "8", "PENDING", time.Time{}
	job2.Start = time.Time{}
	if err := s.UpsertJobs(ctx, "", time.Time{}, []units.Unit{job2}); err != nil {
		t.Fatal(err)
	}
	u, _ = s.Unit(ctx, key("8"))
	if u.Status != units.StatusPending || u.Figures.Energy != nil {
		t.Errorf("slurm-only unit %+v", u)
	}
}

// seed stores units for the filter and usage tests.
func seed(t *testing.T, s *Store) {
	t.Helper()
	ctx := context.Background()
	jobs := []units.Unit{
		{ID: "1", User: "alice", Project: "pa", State: "COMPLETED", Start: t0, End: t0.Add(time.Hour), Allocation: units.Allocation{CPUs: 2}},
		{ID: "2", User: "alice", Project: "pb", State: "RUNNING", Start: t0.Add(2 * time.Hour), Allocation: units.Allocation{CPUs: 4}},
		{ID: "3", User: "bob", Project: "pa", State: "COMPLETED", Start: t0.Add(24 * time.Hour), End: t0.Add(25 * time.Hour), Allocation: units.Allocation{CPUs: 1}},
		{ID: "4", User: "bob", Project: "pb", State: "FAILED", Start: t0.Add(40 * 24 * time.Hour), End: t0.Add(40*24*time.Hour + time.Hour)},
	}
	var obs []Observation
	for i := range jobs {
		jobs[i].Cluster, jobs[i].Kind = "c1", units.KindJob
		st := units.StatusFinal
		if jobs[i].End.IsZero() {
			st = units.StatusRunning
		}
		last := jobs[i].End
		if last.IsZero() {
			last = jobs[i].Start.Add(30 * time.Minute)
		}
		obs = append(obs, Observation{Key: jobs[i].Key(), First: jobs[i].Start, Last: last,
			Delta: energy(float64(100*(i+1)), 10), Status: st})
	}
	// A pod nobody described.
	obs = append(obs, Observation{Key: units.Key{Cluster: "c2", Kind: units.KindPod, ID: "uid-1"}, Name: "web", Project: "shop",
		First: t0, Last: t0.Add(time.Hour), Delta: energy(1, 1), Status: units.StatusRunning})
	if err := s.ApplyCycle(ctx, "tsdb", t0, obs); err != nil {
		t.Fatal(err)
	}
	if err := s.UpsertJobs(ctx, "sacct", t0, jobs); err != nil {
		t.Fatal(err)
	}
}

func ids(us []units.Unit) []string {
	out := []string{}
	for _, u := range us {
		out = append(out, u.ID)
	}
	return out
}

func same(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func boolp(b bool) *bool { return &b }

func testFilters(t *testing.T, s *Store) {
	seed(t, s)
	ctx := context.Background()
	cases := []struct {
		name string
		f    units.Filter
		want []string
	}{
		{"all, newest first (ties: newest stored first)", units.Filter{}, []string{"4", "3", "2", "uid-1", "1"}},
		{"user", units.Filter{Users: []string{"alice"}}, []string{"2", "1"}},
		{"project", units.Filter{Projects: []string{"pa"}}, []string{"3", "1"}},
		{"users and project", units.Filter{Users: []string{"alice", "bob"}, Projects: []string{"pb"}}, []string{"4", "2"}},
		{"kind", units.Filter{Kinds: []units.Kind{units.KindPod}}, []string{"uid-1"}},
		{"cluster", units.Filter{Clusters: []string{"c1"}, Limit: 2}, []string{"4", "3"}},
		{"offset", units.Filter{Clusters: []string{"c1"}, Limit: 2, Offset: 2}, []string{"2", "1"}},
		{"ids", units.Filter{IDs: []string{"1", "3", "99"}}, []string{"3", "1"}},
		{"running", units.Filter{Running: boolp(true), Kinds: []units.Kind{units.KindJob}}, []string{"2"}},
		{"not running", units.Filter{Running: boolp(false)}, []string{"4", "3", "1"}},
		// Ran at some time in [t0+90m, t0+23h): 2 and the pod (running); 1 ended at t0+1h.
		{"time range", units.Filter{From: t0.Add(90 * time.Minute), To: t0.Add(23 * time.Hour)}, []string{"2", "uid-1"}},
		{"time range overlap", units.Filter{From: t0.Add(30 * time.Minute), To: t0.Add(24*time.Hour + time.Minute)}, []string{"3", "2", "uid-1", "1"}},
		// SQL in a value is a value.
		{"sql metacharacters", units.Filter{Users: []string{"alice' OR '1'='1", "x\"; DROP TABLE units; --"}}, []string{}},
	}
	for _, c := range cases {
		got, err := s.Units(ctx, c.f)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if !same(ids(got), c.want) {
			t.Errorf("%s: got %v, want %v", c.name, ids(got), c.want)
		}
	}
	bad := []units.Filter{
		{From: t0, To: t0.Add(-time.Hour)},
		{Limit: -1},
		{Limit: units.MaxLimit + 1},
		{Fields: []string{"energy; DROP"}},
		{Kinds: []units.Kind{"jobs"}},
		{Users: make([]string, maxList+1)},
	}
	for _, f := range bad {
		if _, err := s.Units(ctx, f); !errors.Is(err, units.ErrInvalid) {
			t.Errorf("filter %+v: %v, want ErrInvalid", f, err)
		}
	}
	if _, err := s.Unit(ctx, units.Key{ID: "nope"}); !errors.Is(err, units.ErrNotFound) {
		t.Errorf("missing unit: %v", err)
	}
	// The same id in two clusters is ambiguous without the cluster.
	if err := s.ApplyCycle(ctx, "tsdb", t0, []Observation{{Key: units.Key{Cluster: "c2", Kind: units.KindJob, ID: "1"}, Status: units.StatusRunning, First: t0, Last: t0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Unit(ctx, units.Key{ID: "1"}); !errors.Is(err, units.ErrAmbiguous) {
		t.Errorf("ambiguous unit: %v", err)
	}
	if u, err := s.Unit(ctx, units.Key{Cluster: "c1", ID: "1"}); err != nil || u.User != "alice" {
		t.Errorf("unit with cluster: %+v %v", u, err)
	}
}

// testUsageRange checks that usage sums the units that started in the
// range asked, not in the whole days it touches, and reports the range it
// summed.
func testUsageRange(t *testing.T, s *Store) {
	ctx := context.Background()
	d := time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC)
	h := func(hours int) time.Time { return d.Add(time.Duration(hours) * time.Hour) }
	var obs []Observation
	for _, u := range []struct {
		id     string
		start  time.Time
		joules float64
	}{{"a", h(2), 1000}, {"b", h(10), 200}, {"c", h(20), 30}, {"e", h(36), 4}} {
		obs = append(obs, Observation{Key: units.Key{Cluster: "c1", Kind: units.KindPod, ID: u.id}, Project: "shop",
			First: u.start, Last: u.start.Add(time.Hour), Delta: energy(u.joules, 0), Status: units.StatusFinal})
	}
	if err := s.ApplyCycle(ctx, "tsdb", d, obs); err != nil {
		t.Fatal(err)
	}
	// A job Slurm describes, not started: it counts at its submission.
	if err := s.UpsertJobs(ctx, "sacct", d, []units.Unit{{Cluster: "c1", Kind: units.KindJob, ID: "p", User: "alice", Project: "shop",
		State: "PENDING", Submit: h(7)}}); err != nil {
		t.Fatal(err)
	}
	type want struct {
		from, to time.Time
		units    int64
		joules   float64
	}
	for _, c := range []struct {
		name     string
		from, to time.Time
		period   units.Period
		want     []want
	}{
		{"06:00-18:00", h(6), h(18), "", []want{{h(6), h(18), 2, 200}}},
		{"within a day, by day", h(6), h(18), units.PeriodDay, []want{{h(6), h(18), 2, 200}}},
		{"partial days and a whole one", h(-12), h(37), "", []want{{h(-12), h(37), 5, 1234}}},
		{"by day from 06:00", h(6), h(48), units.PeriodDay, []want{{h(6), h(24), 3, 230}, {h(24), h(48), 1, 4}}},
		{"across midnight", h(19), h(30), units.PeriodDay, []want{{h(19), h(24), 1, 30}}},
		{"whole days", h(0), h(48), units.PeriodMonth, []want{{h(0), h(48), 5, 1234}}},
		{"an instant", h(10), h(10).Add(time.Millisecond), "", []want{{h(10), h(10).Add(time.Millisecond), 1, 200}}},
	} {
		us, err := s.Usage(ctx, units.UsageQuery{From: c.from, To: c.to, Period: c.period, Projects: []string{"shop"}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []want
		for _, u := range us {
			got = append(got, want{u.From, u.To, u.Units, u.Figures.Joules()})
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %+v, want %+v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if !got[i].from.Equal(c.want[i].from) || !got[i].to.Equal(c.want[i].to) || got[i].units != c.want[i].units || !near(got[i].joules, c.want[i].joules) {
				t.Errorf("%s: bucket %d %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// testUsage: the seeded units' usage per project, day and month, after a
// unit moves to another project, and the queries refused.
func testUsage(t *testing.T, s *Store) {
	seed(t, s)
	ctx := context.Background()
	testUsageByProject(ctx, t, s)
	testUsageByPeriod(ctx, t, s)
	testUsageMoved(ctx, t, s)
	for _, q := range []units.UsageQuery{{}, {From: t0, To: t0.Add(-time.Hour)}, {From: t0, To: t0.Add(time.Hour), Period: "week"}, {From: t0, To: t0.Add(time.Hour), By: []units.GroupBy{"node"}}} {
		if _, err := s.Usage(ctx, q); !errors.Is(err, units.ErrInvalid) {
			t.Errorf("usage %+v: %v, want ErrInvalid", q, err)
		}
	}
}

func testUsageByProject(ctx context.Context, t *testing.T, s *Store) {
	// Per project over the whole time: pa has units 1 and 3.
	us, err := s.Usage(ctx, units.UsageQuery{From: t0.Add(-24 * time.Hour), To: t0.Add(60 * 24 * time.Hour), By: []units.GroupBy{units.ByProject}, Kinds: []units.Kind{units.KindJob}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]units.Usage{}
	for _, u := range us {
		got[u.Project] = u
	}
	pa := got["pa"]
	// Unit 1: package 100, dram 10, cpu 50, wall 3600; unit 3: 300, 10, 150, 3600.
	if pa.Units != 2 || pa.Figures.Joules() != 420 || pa.Figures.CPUSeconds != 200 || pa.WallSeconds != 7200 {
		t.Errorf("pa usage %+v", pa)
	}
	// CPU-weighted power: (50·110/3600 + 150·310/3600) / 200.
	wantPower := (50*110.0/3600 + 150*310.0/3600) / 200
	if !near(pa.Averages.PowerWatts, wantPower) {
		t.Errorf("pa average power %v, want %v", pa.Averages.PowerWatts, wantPower)
	}
	// CPU efficiency: unit 1 uses 50/3600 of 2 CPUs, unit 3 150/3600 of 1.
	wantEff := (50*(50.0/3600/2) + 150*(150.0/3600/1)) / 200
	if !near(pa.Averages.CPUEfficiency, wantEff) {
		t.Errorf("pa cpu efficiency %v, want %v", pa.Averages.CPUEfficiency, wantEff)
	}
	if len(us) != 2 {
		t.Errorf("job usage buckets %v, want pa and pb", len(us))
	}
}

func testUsageByPeriod(ctx context.Context, t *testing.T, s *Store) {
	// Per day: unit 1 and 2 on t0's day, 3 on the next.
	days, err := s.Usage(ctx, units.UsageQuery{From: t0, To: t0.Add(48 * time.Hour), Period: units.PeriodDay, Users: []string{"alice", "bob"}})
	if err != nil {
		t.Fatal(err)
	}
	// The first day is summed from t0 (08:00), and says so.
	if len(days) != 2 || days[0].Units != 2 || days[1].Units != 1 || !days[0].From.Equal(t0) ||
		!days[1].To.Equal(t0.Truncate(24*time.Hour).Add(48*time.Hour)) {
		t.Errorf("daily usage %+v", days)
	}
	// Per month and user.
	months, err := s.Usage(ctx, units.UsageQuery{From: t0.AddDate(0, -1, 0), To: t0.AddDate(0, 3, 0), Period: units.PeriodMonth, By: []units.GroupBy{units.ByUser}, Users: []string{"bob"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(months) != 2 || months[0].From.Month() != time.March || months[1].From.Month() != time.April || months[0].Units != 1 || months[1].Units != 1 {
		t.Errorf("monthly usage %+v", months)
	}
}

func testUsageMoved(ctx context.Context, t *testing.T, s *Store) {
	// Moving a unit to another project moves its usage; totals still
	// equal the units'.
	u1, _ := s.Unit(ctx, key("1"))
	u1.Project = "pb"
	if err := s.UpsertJobs(ctx, "sacct", t0, []units.Unit{u1}); err != nil {
		t.Fatal(err)
	}
	us, _ := s.Usage(ctx, units.UsageQuery{From: t0.Add(-24 * time.Hour), To: t0.Add(60 * 24 * time.Hour), By: []units.GroupBy{units.ByProject}, Kinds: []units.Kind{units.KindJob}})
	got := map[string]units.Usage{}
	for _, u := range us {
		got[u.Project] = u
	}
	if got["pa"].Units != 1 || got["pa"].Figures.Joules() != 310 || got["pb"].Units != 3 {
		t.Errorf("after moving unit 1: pa %+v pb %+v", got["pa"], got["pb"])
	}
	all, _ := s.Units(ctx, units.Filter{Kinds: []units.Kind{units.KindJob}})
	var sum float64
	for _, u := range all {
		sum += u.Figures.Joules()
	}
	if rolled := got["pa"].Figures.Joules() + got["pb"].Figures.Joules(); !near(rolled, sum) {
		t.Errorf("rollup %v != units %v", rolled, sum)
	}
}

func testAccess(t *testing.T, s *Store) {
	seed(t, s)
	ctx := context.Background()
	for _, c := range []struct {
		user string
		keys []units.Key
		want bool
	}{
		{"alice", []units.Key{{ID: "1"}, {ID: "2"}}, true},
		{"alice", []units.Key{{ID: "1"}, {ID: "3"}}, false},
		{"bob", []units.Key{{Cluster: "c1", Kind: units.KindJob, ID: "3"}}, true},
		{"bob", []units.Key{{Cluster: "c2", ID: "3"}}, false},
		{"alice", []units.Key{{ID: "999"}}, false},
	} {
		got, err := s.Owned(ctx, c.user, c.keys)
		if err != nil || got != c.want {
			t.Errorf("Owned(%s, %v) = %v, %v; want %v", c.user, c.keys, got, err, c.want)
		}
	}
	ps, err := s.Projects(ctx, units.Membership{Clusters: []string{"c1"}})
	if err != nil || len(ps) != 2 || ps[0].Name != "pa" || !same(ps[0].Users, []string{"alice", "bob"}) {
		t.Errorf("projects %+v %v", ps, err)
	}
	us, err := s.Users(ctx, units.Membership{Users: []string{"alice"}})
	if err != nil || len(us) != 1 || !same(us[0].Projects, []string{"pa", "pb"}) {
		t.Errorf("users %+v %v", us, err)
	}
	ps, _ = s.Projects(ctx, units.Membership{Clusters: []string{"c2"}})
	if len(ps) != 1 || ps[0].Name != "shop" || len(ps[0].Users) != 0 {
		t.Errorf("c2 projects %+v", ps)
	}
}

func testPending(t *testing.T, s *Store) {
	seed(t, s)
	ctx := context.Background()
	before, _ := s.Unit(ctx, key("2"))
	n, err := s.MarkPending(ctx)
	if err != nil || n != 2 { // job 2 and the pod
		t.Fatalf("marked %d, %v; want 2", n, err)
	}
	after, _ := s.Unit(ctx, key("2"))
	if after.Status != units.StatusPending || after.Figures.Joules() != before.Figures.Joules() || after.Figures.Joules() == 0 {
		t.Errorf("pending unit %+v (before %v J)", after, before.Figures.Joules())
	}
	final, _ := s.Unit(ctx, key("1"))
	if final.Status != units.StatusFinal {
		t.Errorf("final unit became %s", final.Status)
	}
}

func testPrune(t *testing.T, s *Store) {
	seed(t, s)
	ctx := context.Background()
	// Units 1 and 3 ended before t0+30d; 2 runs; 4 ended later.
	n, err := s.Prune(ctx, t0.Add(30*24*time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("pruned %d, %v; want 2", n, err)
	}
	all, _ := s.Units(ctx, units.Filter{Kinds: []units.Kind{units.KindJob}})
	if !same(ids(all), []string{"4", "2"}) {
		t.Errorf("after prune %v", ids(all))
	}
	us, _ := s.Usage(ctx, units.UsageQuery{From: t0.Add(-24 * time.Hour), To: t0.Add(60 * 24 * time.Hour), Kinds: []units.Kind{units.KindJob}})
	if len(us) != 1 || us[0].Units != 1 {
		t.Errorf("usage after prune %+v (want unit 4 only)", us)
	}
}

func TestBackupSQLite(t *testing.T) {
	s := openStore(t, Config{Path: filepath.Join(t.TempDir(), "units.db")})
	seed(t, s)
	path := filepath.Join(t.TempDir(), "backup.db")
	if err := s.Backup(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	if err := s.Backup(context.Background(), path); err == nil {
		t.Error("backup overwrote an existing file")
	}
	b := openStore(t, Config{Path: path})
	all, err := b.Units(context.Background(), units.Filter{})
	if err != nil || len(all) != 5 {
		t.Fatalf("backup holds %d units, %v", len(all), err)
	}
	u, _ := b.Unit(context.Background(), key("3"))
	if u.Figures.Joules() != 310 || u.User != "bob" {
		t.Errorf("backup's unit 3: %+v", u)
	}
}

func TestFigureEncoding(t *testing.T) {
	m := map[zoneMethod]float64{{"package", "measured"}: 1234.5678901234567, {"we|ird=z;o%ne", "est"}: 1e-300, {"gpu", ""}: 0.1}
	s := encodeEnergy(m)
	back, err := decodeEnergy(s)
	if err != nil || len(back) != 3 {
		t.Fatalf("%q → %v, %v", s, back, err)
	}
	for k, v := range m {
		if back[k] != v {
			t.Errorf("%v: %v != %v (encoded %q)", k, back[k], v, s)
		}
	}
	for _, bad := range []string{"package=1", "package|measured", "a|b=x", "a|b=1;;"} {
		if _, err := decodeEnergy(bad); err == nil {
			t.Errorf("no error for %q", bad)
		}
	}
}
