package testenv

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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
	log, err := os.OpenFile(filepath.Join(p.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p.bin, "--config.file="+filepath.Join(p.dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(p.dir, "data"), "--storage.tsdb.retention.time=100y",
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", p.port), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start prometheus: %v", err)
	}
	log.Close()
	p.cmd = cmd
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(p.URL + "/-/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := os.ReadFile(filepath.Join(p.dir, "log"))
	t.Fatalf("prometheus not ready within 60 s:\n%s", lastLines(string(out), 20))
}

// Stop stops the server (its data stays for Start).
func (p *Prometheus) Stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
	p.cmd = nil
}
