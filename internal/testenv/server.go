package testenv

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// startServer starts bin with args in its own process group, logging to
// dir/log, and waits up to ready for readyURL to answer 200: the start-up
// the TSDB servers share.
func startServer(t testing.TB, name, dir, bin string, args []string, readyURL string, ready time.Duration) *exec.Cmd {
	t.Helper()
	logPath := filepath.Join(dir, "log")
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	log.Close()
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	for deadline := time.Now().Add(ready); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(readyURL)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return cmd
			}
		}
	}
	out, _ := os.ReadFile(logPath)
	t.Fatalf("%s not ready (%s) within %v:\n%s", name, readyURL, ready, lastLines(string(out), 20))
	return nil
}

// stopServer stops a server started by startServer: SIGTERM, then SIGKILL
// after grace.
func stopServer(cmd *exec.Cmd, grace time.Duration) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		cmd.Process.Kill()
		<-done
	}
}
