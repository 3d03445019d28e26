package testenv

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
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
	log, err := os.OpenFile(filepath.Join(vm.dir, "log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(vm.bin,
		"-storageDataPath="+filepath.Join(vm.dir, "data"),
		fmt.Sprintf("-httpListenAddr=127.0.0.1:%d", vm.port),
		"-retentionPeriod=100y",
		"-search.latencyOffset=0s",
		"-search.disableCache",
		"-loggerLevel=ERROR")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		t.Fatalf("start victoria-metrics: %v", err)
	}
	log.Close()
	vm.cmd = cmd
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(vm.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := os.ReadFile(filepath.Join(vm.dir, "log"))
	t.Fatalf("victoria-metrics did not answer /health within 30 s:\n%s", out)
}

// Stop stops the server (its data stays for Start).
func (vm *VictoriaMetrics) Stop() {
	if vm.cmd == nil {
		return
	}
	vm.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { vm.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		vm.cmd.Process.Kill()
		<-done
	}
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
