package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// VictoriaMetrics is a single-node VictoriaMetrics server (Debian's
// victoria-metrics) on a temporary directory, for tests that need a real
// Prometheus-compatible TSDB loaded with samples of their choosing.
type VictoriaMetrics struct {
	URL  string // http://127.0.0.1:PORT
	bin  string
	dir  string
	port int
	cmd  *exec.Cmd
	t    testing.TB
}

// StartVictoriaMetrics installs victoria-metrics when missing, starts it
// and stops it (removing its data) when the test ends. Queries see new
// samples at once: no latency offset, no result cache.
func StartVictoriaMetrics(t testing.TB) *VictoriaMetrics {
	t.Helper()
	bin := Tool(t, "victoria-metrics", "victoria-metrics")
	dir, err := os.MkdirTemp("", "wattrace-vm-")
	if err != nil {
		t.Fatal(err)
	}
	vm := &VictoriaMetrics{bin: bin, dir: dir, port: FreePort(t), t: t}
	vm.URL = fmt.Sprintf("http://127.0.0.1:%d", vm.port)
	t.Cleanup(func() {
		vm.Stop()
		os.RemoveAll(dir)
	})
	vm.Start()
	return vm
}

// Start (re)starts the server on its port and data.
func (vm *VictoriaMetrics) Start() {
	t := vm.t
	t.Helper()
	if vm.cmd != nil {
		return
	}
	vm.cmd = startServer(t, "victoria-metrics", vm.dir, vm.bin, []string{
		"-storageDataPath=" + filepath.Join(vm.dir, "data"),
		fmt.Sprintf("-httpListenAddr=127.0.0.1:%d", vm.port),
		"-retentionPeriod=100y",
		"-search.latencyOffset=0s",
		"-search.disableCache",
		"-loggerLevel=ERROR",
	}, vm.URL+"/health", 30*time.Second)
}

// Stop stops the server (its data stays for Start).
func (vm *VictoriaMetrics) Stop() {
	if vm.cmd == nil {
		return
	}
	stopServer(vm.cmd, 20*time.Second)
	vm.cmd = nil
}

// Import loads samples in VictoriaMetrics's JSON line format
// (/api/v1/import: {"metric":{…},"values":[…],"timestamps":[…]} per
// line) and flushes them so that queries see them.
func (vm *VictoriaMetrics) Import(t testing.TB, jsonl []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, vm.URL+"/api/v1/import", bytes.NewReader(jsonl))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("import: %s", resp.Status)
	}
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, vm.URL+"/internal/force_flush", nil)
	if resp, err = http.DefaultClient.Do(req); err != nil {
		t.Fatalf("flush: %v", err)
	}
	resp.Body.Close()
}
