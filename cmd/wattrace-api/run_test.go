package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/units"
)

// TestServerCountsFromVictoriaMetrics runs the whole server against a real
// VictoriaMetrics holding one job's series on two nodes: the stored job
// must carry the counters' increase, /health must answer, and /metrics
// must count the TSDB queries and pass promlint.
func TestServerCountsFromVictoriaMetrics(t *testing.T) {
	vm := testenv.StartVictoriaMetrics(t)
	now := time.Now().Truncate(time.Second)
	var body strings.Builder
	for i, node := range []string{"n1", "n2"} {
		var ts []int64
		var vs []float64
		for k := 0; k <= 20; k++ { // 5 minutes, every 15 s, ending 30 s ago
			ts = append(ts, now.Add(time.Duration(k*15-330)*time.Second).UnixMilli())
			vs = append(vs, float64((i+1)*100*(k+1)))
		}
		line, _ := json.Marshal(map[string]any{
			"metric": map[string]string{"__name__": "wattrace_job_energy_joules_total", "job_id": "42", "user": "alice",
				"uid": "1001", "slurm_node": node, "instance": node + ":9841", "zone": "package", "source": "rapl",
				"method": "measured", "mode": "dynamic"},
			"values": vs, "timestamps": ts})
		body.Write(line)
		body.WriteByte('\n')
	}
	vm.Import(t, []byte(body.String()))
	dir := t.TempDir()
	port := testenv.FreePort(t)
	cfg, err := Load([]string{"--tsdb.url=" + vm.URL, "--store.path=" + filepath.Join(dir, "units.db"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--updater.interval=1s", "--updater.delay=0s",
		"--updater.lookback=1h", "--slurm.source=none", "--cluster=c1", "--store.backup.dir=" + dir, "--store.backup.keep=2"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := build(ctx, cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		s.Close()
	}()
	// 21 samples per node from 100 (n1) and 200 (n2) counted from 0:
	// 2100 + 4200.
	const want = 6300.0
	var u units.Unit
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if u, err = s.store.Unit(ctx, units.Key{Cluster: "c1", Kind: units.KindJob, ID: "42"}); err == nil && u.Figures.Joules() == want {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if u.Figures.Joules() != want || u.User != "alice" || len(u.Nodes) != 2 {
		t.Fatalf("job 42: %+v (%v), want %v J on two nodes", u, err, want)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := get("/health"); code != 200 || !strings.Contains(b, `"status":"success"`) {
		t.Errorf("/health %d %s", code, b)
	}
	code, metrics := get("/metrics")
	if code != 200 || !strings.Contains(metrics, "wattrace_api_tsdb_queries_total") || strings.Contains(metrics, "wattrace_api_tsdb_queries_total 0\n") {
		t.Errorf("/metrics %d: %s", code, metrics)
	}
	testenv.Promlint(t, []byte(metrics))
	// Backups: a consistent copy each time, the oldest beyond keep deleted.
	for i := 0; i < 3; i++ {
		if _, err := s.backup(ctx, now.Add(time.Duration(i)*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "units-*.db"))
	if len(files) != 2 || !strings.Contains(files[1], now.Add(2*time.Hour).UTC().Format("20060102T15")) {
		t.Errorf("backups %v", files)
	}
	if fi, err := os.Stat(files[1]); err != nil || fi.Size() == 0 {
		t.Errorf("backup %v %v", fi, err)
	}
}
