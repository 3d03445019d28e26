package store

import (
	"context"
	"io/fs"
	"path/filepath"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/wattrace/wattrace/pkg/units"
)

// A unit's GPU held-idle seconds add up over cycles, come back from the
// units table and the usage rollup on both backends, and fold with the
// rest of the figures.
func TestGPUIdleSecondsRoundTrip(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			s := open(t, func() time.Time { return t0.Add(time.Hour) })
			obs := []Observation{{
				Key: key("300"), User: "alice", Nodes: []string{"g1"}, First: t0, Last: t0.Add(time.Minute),
				Delta: units.Figures{CPUSeconds: 10, GPUIdleSeconds: 45.5}, Status: units.StatusRunning,
				Series: map[string]SeriesState{"a": {V: 45.5, T: t0.Add(time.Minute).UnixMilli()}},
			}}
			if err := s.ApplyCycle(ctx, "tsdb", t0.Add(time.Minute), obs); err != nil {
				t.Fatal(err)
			}
			obs[0].Delta = units.Figures{GPUIdleSeconds: 60}
			obs[0].First, obs[0].Last = t0.Add(2*time.Minute), t0.Add(3*time.Minute)
			obs[0].Series = map[string]SeriesState{"a": {V: 105.5, T: t0.Add(3 * time.Minute).UnixMilli()}}
			if err := s.ApplyCycle(ctx, "tsdb", t0.Add(3*time.Minute), obs); err != nil {
				t.Fatal(err)
			}
			u, err := s.Unit(ctx, key("300"))
			if err != nil || u.Figures.GPUIdleSeconds != 105.5 || u.Figures.CPUSeconds != 10 {
				t.Fatalf("unit %+v %v; want 105.5 s held idle, 10 s CPU", u.Figures, err)
			}
			us, err := s.Usage(ctx, units.UsageQuery{From: t0, To: t0.Add(time.Hour), Users: []string{"alice"}})
			if err != nil || len(us) != 1 || us[0].Figures.GPUIdleSeconds != 105.5 {
				t.Fatalf("usage %+v %v; want 105.5 s held idle", us, err)
			}
		})
	}
}

// A store at schema 2 (before the column) migrates to 3 keeping its
// units, whose held-idle seconds read 0.
func TestGPUIdleMigrationFrom2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "units.db")
	s := openStore(t, Config{Driver: SQLite, Path: path, Now: func() time.Time { return t0.Add(time.Hour) }})
	obs := []Observation{{Key: key("7"), User: "bob", First: t0, Last: t0.Add(time.Minute),
		Delta: units.Figures{CPUSeconds: 3}, Status: units.StatusRunning,
		Series: map[string]SeriesState{"a": {V: 3, T: t0.Add(time.Minute).UnixMilli()}}}}
	if err := s.ApplyCycle(ctx, "tsdb", t0.Add(time.Minute), obs); err != nil {
		t.Fatal(err)
	}
	db := s.db
	sub, err := fs.Sub(migrations, "migrations/"+SQLite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, sub)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 2); err != nil {
		t.Fatal(err)
	}
	var cols int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM pragma_table_info('units') WHERE name = 'gpu_idle_s'").Scan(&cols); err != nil || cols != 0 {
		t.Fatalf("gpu_idle_s after down to 2: %d %v", cols, err)
	}
	s.Close()
	s = openStore(t, Config{Driver: SQLite, Path: path, Now: func() time.Time { return t0.Add(time.Hour) }})
	if v, err := s.Version(ctx); err != nil || v != 3 {
		t.Fatalf("version %d %v", v, err)
	}
	u, err := s.Unit(ctx, key("7"))
	if err != nil || u.Figures.CPUSeconds != 3 || u.Figures.GPUIdleSeconds != 0 {
		t.Fatalf("unit after the migration %+v %v", u.Figures, err)
	}
}
