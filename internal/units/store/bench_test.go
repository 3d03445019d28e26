package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/units"
)

// The scale of the benchmarks (a large site): a year of 1 M units from 10 k
// users in 1 k projects.
const (
	benchUnits    = 1_000_000
	benchUsers    = 10_000
	benchProjects = 1_000
)

var benchYear = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// benchStore opens the benchmark database, filling it through the
// store's own write path (ApplyCycle, so the rollup is the real one) when
// it does not exist yet. The file is kept in the temporary directory
// (WATTRACE_BENCH_DB overrides the path), so later runs skip the load.
func benchStore(b *testing.B) *Store {
	b.Helper()
	path := os.Getenv("WATTRACE_BENCH_DB")
	if path == "" {
		path = filepath.Join(os.TempDir(), fmt.Sprintf("wattrace-units-bench-%d.db", benchUnits))
	}
	ctx := context.Background()
	fresh := false
	if _, err := os.Stat(path); err != nil {
		fresh = true
	}
	s, err := Open(ctx, Config{Path: path})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	var n int64
	if err := s.db.QueryRow("SELECT COUNT(*) FROM units").Scan(&n); err != nil {
		b.Fatal(err)
	}
	if !fresh && n == benchUnits {
		return s
	}
	if n != 0 {
		b.Fatalf("%s holds %d units, not %d: delete it", path, n, benchUnits)
	}
	start := time.Now()
	rng := rand.New(rand.NewPCG(17, 17))
	// Each user works in one to three projects.
	userProjects := make([][]string, benchUsers)
	for u := range userProjects {
		for k := 0; k <= rng.IntN(3); k++ {
			userProjects[u] = append(userProjects[u], "proj"+strconv.Itoa(rng.IntN(benchProjects)))
		}
	}
	const batch = 10_000
	obs := make([]Observation, 0, batch)
	for i := 0; i < benchUnits; i++ {
		u := rng.IntN(benchUsers)
		st := benchYear.Add(time.Duration(rng.Int64N(int64(365 * 24 * time.Hour)))).Truncate(time.Second)
		dur := time.Duration(60+rng.IntN(24*3600)) * time.Second
		cpus := float64(1 + rng.IntN(32))
		busy := cpus * dur.Seconds() * (0.2 + 0.8*rng.Float64())
		j := busy * 10
		obs = append(obs, Observation{
			Key:  units.Key{Cluster: "bench", Kind: units.KindJob, ID: strconv.Itoa(1_000_000 + i)},
			User: "user" + strconv.Itoa(u), Project: userProjects[u][rng.IntN(len(userProjects[u]))],
			Nodes: []string{"node" + strconv.Itoa(rng.IntN(2000))}, First: st, Last: st.Add(dur),
			Delta: units.Figures{
				Energy: []units.ZoneEnergy{{Zone: "package", Method: "measured", Joules: j}, {Zone: "dram", Method: "measured", Joules: j / 8}},
				Emissions: []units.Emission{{Zone: "package", Provider: "constant", Grams: j / 3.6e6 * 50},
					{Zone: "dram", Provider: "constant", Grams: j / 8 / 3.6e6 * 50}},
				CPUSeconds: busy, IOReadBytes: float64(rng.IntN(1 << 30)), NetSentBytes: float64(rng.IntN(1 << 28)),
			},
			Status: units.StatusFinal,
		})
		if len(obs) == batch || i == benchUnits-1 {
			if err := s.ApplyCycle(ctx, "bench", st, obs); err != nil {
				b.Fatal(err)
			}
			obs = obs[:0]
		}
	}
	if _, err := s.db.Exec("ANALYZE"); err != nil {
		b.Fatal(err)
	}
	b.Logf("loaded %d units into %s in %v", benchUnits, path, time.Since(start).Round(time.Second))
	return s
}

// reportPercentiles adds p50 and p95 in milliseconds to the benchmark.
func reportPercentiles(b *testing.B, d []time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	b.ReportMetric(ms(0.5), "p50-ms")
	b.ReportMetric(ms(0.95), "p95-ms")
}

// BenchmarkUserMonth: one user's units of one month (what "My jobs"
// shows), for random users and months.
func BenchmarkUserMonth(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var d []time.Duration
	total := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		from := benchYear.AddDate(0, rng.IntN(12), 0)
		f := units.Filter{Users: []string{"user" + strconv.Itoa(rng.IntN(benchUsers))}, From: from, To: from.AddDate(0, 1, 0)}
		t0 := time.Now()
		us, err := s.Units(ctx, f)
		d = append(d, time.Since(t0))
		if err != nil {
			b.Fatal(err)
		}
		total += len(us)
	}
	b.StopTimer()
	if total == 0 {
		b.Fatal("no units found")
	}
	b.ReportMetric(float64(total)/float64(b.N), "units/op")
	reportPercentiles(b, d)
}

// BenchmarkProjectYearUsage: one project's usage over the year, in total
// and per day.
func BenchmarkProjectYearUsage(b *testing.B) {
	s := benchStore(b)
	ctx := context.Background()
	for _, period := range []units.Period{units.PeriodTotal, units.PeriodDay} {
		name := string(period)
		if name == "" {
			name = "total"
		}
		b.Run(name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			var d []time.Duration
			var n int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				q := units.UsageQuery{Projects: []string{"proj" + strconv.Itoa(rng.IntN(benchProjects))},
					From: benchYear, To: benchYear.AddDate(1, 0, 0), Period: period, By: []units.GroupBy{units.ByProject}}
				t0 := time.Now()
				us, err := s.Usage(ctx, q)
				d = append(d, time.Since(t0))
				if err != nil {
					b.Fatal(err)
				}
				for _, u := range us {
					n += u.Units
				}
			}
			b.StopTimer()
			if n == 0 {
				b.Fatal("no usage found")
			}
			b.ReportMetric(float64(n)/float64(b.N), "units/op")
			reportPercentiles(b, d)
		})
	}
}
