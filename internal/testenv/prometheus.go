package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// Prometheus is a Prometheus server (Debian's prometheus) whose storage
// was backfilled with samples of the test's choosing (promtool tsdb
// create-blocks-from openmetrics), for tests that need a real Prometheus
// query API over known history. It scrapes nothing.
type Prometheus struct {
	URL  string
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	t    testing.TB
}

// StartPrometheusBackfilled writes openMetrics (OpenMetrics text with
// timestamps, ending in "# EOF") into blocks, starts Prometheus on them and
// stops it (removing its data) when the test ends.
func StartPrometheusBackfilled(t testing.TB, openMetrics []byte) *Prometheus {
	t.Helper()
	bin := Tool(t, "prometheus", "prometheus")
	promtool := Tool(t, "promtool", "prometheus")
	dir, err := os.MkdirTemp("", "wattrace-prom-")
	if err != nil {
		t.Fatal(err)
	}
	p := &Prometheus{bin: bin, dir: dir, port: FreePort(t), t: t}
	p.URL = fmt.Sprintf("http://127.0.0.1:%d", p.port)
	t.Cleanup(func() {
		p.Stop()
		os.RemoveAll(dir)
	})
	input := filepath.Join(dir, "input.om")
	if err := os.WriteFile(input, openMetrics, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "tsdb", "create-blocks-from", "openmetrics", input, filepath.Join(dir, "data")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool backfill: %v\n%s", err, lastLines(string(out), 10))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte("global: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Start()
	return p
}

// Start (re)starts the server on its port and data.
func (p *Prometheus) Start() {
	t := p.t
	t.Helper()
	if p.cmd != nil {
		return
	}
	p.cmd = startServer(t, "prometheus", p.dir, p.bin, []string{
		"--config.file=" + filepath.Join(p.dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(p.dir, "data"), "--storage.tsdb.retention.time=100y",
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p.port), "--log.level=warn",
	}, p.URL+"/-/ready", 60*time.Second)
}

// Stop stops the server (its data stays for Start).
func (p *Prometheus) Stop() {
	if p.cmd == nil {
		return
	}
	stopServer(p.cmd, 30*time.Second)
	p.cmd = nil
}
