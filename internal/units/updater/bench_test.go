package updater

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
)

// benchRunning is the number of running units of the cycle benchmark.
const benchRunning = 5000

// BenchmarkCycle5000 runs update cycles with 5,000 running Slurm jobs on
// 2,000 nodes against a real VictoriaMetrics loaded through /api/v1/import:
// 10 series per job (energy: package idle and dynamic, dram; grams of both
// zones; CPU; IO read and write; network sent and received), a sample
// every 15 s, so a one-minute cycle reads 200,000 samples. Each op is one
// steady-state cycle (every unit known and running); the first cycle,
// which creates the 5,000 units, is reported as first-cycle-ms.
func BenchmarkCycle5000(b *testing.B) {
	const span = 14 // minutes of history: the first cycle plus up to 12 more
	if b.N > span-2 {
		b.Skipf("at most %d cycles of history; run with -benchtime=%dx or fewer", span-2, span-2)
	}
	vm := testenv.StartVictoriaMetrics(b)
	base := time.Now().UTC().Truncate(time.Minute).Add(-(span + 5) * time.Minute)
	at := func(m int) time.Time { return base.Add(time.Duration(m) * time.Minute) }
	var ts []int64
	for t := at(0); !t.After(at(span)); t = t.Add(15 * time.Second) {
		ts = append(ts, t.UnixMilli())
	}
	var body []byte
	line := func(labels map[string]string, rate float64) {
		vs := make([]float64, len(ts))
		for i := range vs {
			vs[i] = rate * float64(i+1) * 15
		}
		b, _ := json.Marshal(map[string]any{"metric": labels, "values": vs, "timestamps": ts})
		body = append(append(body, b...), '\n')
	}
	for j := 0; j < benchRunning; j++ {
		node := "node" + strconv.Itoa(j%2000)
		l := map[string]string{"job_id": strconv.Itoa(100000 + j), "user": "user" + strconv.Itoa(j%700), "uid": strconv.Itoa(2000 + j%700),
			"slurm_node": node, "instance": node + ":9841", "job": "wattrace"}
		with := func(kv ...string) map[string]string {
			m := map[string]string{}
			for k, v := range l {
				m[k] = v
			}
			for i := 0; i+1 < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			return m
		}
		line(with("__name__", "wattrace_job_energy_joules_total", "zone", "package", "source", "rapl", "method", "measured", "mode", "idle"), 10)
		line(with("__name__", "wattrace_job_energy_joules_total", "zone", "package", "source", "rapl", "method", "measured", "mode", "dynamic"), 40)
		line(with("__name__", "wattrace_job_energy_joules_total", "zone", "dram", "source", "rapl", "method", "measured", "mode", "dynamic"), 5)
		line(with("__name__", "wattrace_job_emissions_grams_total", "zone", "package", "mode", "dynamic", "provider", "constant"), 0.001)
		line(with("__name__", "wattrace_job_emissions_grams_total", "zone", "dram", "mode", "dynamic", "provider", "constant"), 0.0001)
		line(with("__name__", "wattrace_job_cpu_seconds_total"), 4)
		line(with("__name__", "wattrace_job_io_bytes_total", "device", "8:0", "op", "read"), 1e6)
		line(with("__name__", "wattrace_job_io_bytes_total", "device", "8:0", "op", "write"), 5e5)
		line(with("__name__", "wattrace_job_network_payload_bytes_total", "protocol", "tcp", "direction", "sent"), 1e5)
		line(with("__name__", "wattrace_job_network_payload_bytes_total", "protocol", "tcp", "direction", "received"), 2e5)
	}
	vm.Import(b, body)
	body = nil

	st, err := store.Open(context.Background(), store.Config{Path: filepath.Join(b.TempDir(), "units.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	now := at(2)
	q := newQuerier(b, vm.URL)
	u, err := New(q, st, Config{Cluster: "bench", Lookback: 2 * time.Minute, Now: func() time.Time { return now }, Delay: time.Nanosecond}, nil)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	t0 := time.Now()
	r := u.Cycle(ctx)
	first := time.Since(t0)
	if r.Err != nil || r.New != benchRunning || r.Running != benchRunning {
		b.Fatalf("first cycle: %+v", r)
	}
	var d []time.Duration
	var queries, series, samples int
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		now = at(3 + i)
		before := q.n.Load()
		t1 := time.Now()
		r := u.Cycle(ctx)
		d = append(d, time.Since(t1))
		if r.Err != nil || r.Running != benchRunning || r.New != 0 {
			b.Fatalf("cycle %d: %+v", i, r)
		}
		queries += int(q.n.Load() - before)
		series += r.Series
		samples += r.Samples
	}
	b.StopTimer()
	b.ReportMetric(float64(first.Milliseconds()), "first-cycle-ms")
	b.ReportMetric(float64(queries)/float64(b.N), "queries/cycle")
	b.ReportMetric(float64(series)/float64(b.N), "series/cycle")
	b.ReportMetric(float64(samples)/float64(b.N), "samples/cycle")
	var max time.Duration
	for _, x := range d {
		if x > max {
			max = x
		}
	}
	b.ReportMetric(float64(max.Milliseconds()), "max-cycle-ms")
}
