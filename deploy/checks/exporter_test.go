package deploy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// buildWattrace builds the exporter as `make build` does (static) into a
// directory any user may read, so a non-root uid can run it.
func buildWattrace(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wattrace-deploy-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "wattrace")
	// No -trimpath: the same flags as cmd/exporter's tests, so the build
	// cache they filled serves this build too.
	cmd := exec.Command(goBin(), "build", "-o", bin, "./cmd/exporter")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// freePort returns a TCP port on localhost nobody listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// start runs cmd, stops it with SIGTERM when the test ends, and shows its
// log when the test failed.
func start(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s exited with %v", cmd.Path, err)
			}
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("%s did not stop on SIGINT", cmd.Path)
		}
		if t.Failed() {
			t.Logf("log of %v:\n%s", cmd.Args, logs.String())
		}
	})
}

// scrape parses /metrics at url; nil while the exporter is not up.
func scrape(url string) map[string]*dto.MetricFamily {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil
	}
	return fams
}

// value is the sum of the family's samples whose labels include want.
func value(fams map[string]*dto.MetricFamily, name string, want map[string]string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
	var sum float64
	found := false
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if have[k] != v {
				continue next
			}
		}
		found = true
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		}
	}
	return sum, found
}

// waitFor scrapes url until ok holds for a scrape, or fails after d.
func waitFor(t *testing.T, url string, d time.Duration, what string, ok func(map[string]*dto.MetricFamily) bool) map[string]*dto.MetricFamily {
	t.Helper()
	var last map[string]*dto.MetricFamily
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if fams := scrape(url); fams != nil {
			last = fams
			if ok(fams) {
				return fams
			}
		}
	}
	mode, _ := value(last, "wattrace_accounting_mode", map[string]string{"mode": "bpf"})
	t.Fatalf("%s: not within %v (scraped: %v, bpf mode %v)", what, d, last != nil, mode)
	return nil
}

// bpfMode holds once the exporter accounts with BPF and has completed an
// interval.
func bpfMode(fams map[string]*dto.MetricFamily) bool {
	bpf, _ := value(fams, "wattrace_accounting_mode", map[string]string{"mode": "bpf"})
	n, _ := value(fams, "wattrace_stats_intervals_total", nil)
	return bpf == 1 && n >= 1
}

func localURL(port int) string { return fmt.Sprintf("http://127.0.0.1:%d", port) }
