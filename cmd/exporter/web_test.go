package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"golang.org/x/crypto/bcrypt"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/internal/testenv"
)

// With basic auth on (an exporter-toolkit web config with a bcrypt hash),
// the health endpoints answer without credentials, everything else needs
// them, over a real listener.
func TestHealthWithoutCredentials(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(t.TempDir(), "web.yml")
	if err := os.WriteFile(webCfg, []byte("basic_auth_users:\n  prom: "+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.Web.ListenAddresses = []string{"127.0.0.1:0", "127.0.0.1:0"}
	cfg.Web.ConfigFile = webCfg
	src := &fakeSource{}
	h := newHandlers(src)
	mux, err := newMux(cfg, registries{rest: prometheus.NewRegistry()}, h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// As build does: bind first, route once the handlers exist.
	srv, err := listenWeb(cfg, cli.SlogLogger(zap.NewNop(), "web"))
	if err != nil {
		t.Fatal(err)
	}
	srv.route(mux, h)
	done := make(chan error, 1)
	go func() { done <- srv.serve() }()
	client := &http.Client{Timeout: 5 * time.Second}
	status := func(base, path, user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, l := range srv.lns {
		base := "http://" + l.Addr().String()
		// Before the first interval: 503 from the handler, not 401.
		src.snap = nil
		if got := status(base, "/-/healthy", "", ""); got != http.StatusServiceUnavailable {
			t.Errorf("%s /-/healthy before the first interval, no credentials: %d, want 503", base, got)
		}
		src.snap = &snapshot.Snapshot{}
		for _, c := range []struct {
			path, user, pass string
			want             int
		}{
			{"/-/healthy", "", "", 200},
			{"/-/ready", "", "", 200},
			{"/metrics", "", "", 401},
			{"/metrics", "prom", "wrong", 401},
			{"/metrics", "prom", "s3cret", 200},
			{"/", "", "", 401},
			{"/", "prom", "s3cret", 200},
			{"/-/healthy/x", "", "", 401},
		} {
			if got := status(base, c.path, c.user, c.pass); got != c.want {
				t.Errorf("%s %s (user %q): %d, want %d", base, c.path, c.user, got, c.want)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("serve after shutdown: %v, want http.ErrServerClosed", err)
	}
}

// A taken listen port stops start-up at once, naming web.listen-address,
// before the BPF programs (or anything else heavy) are loaded.
func TestTakenPortFailsBeforeBPF(t *testing.T) {
	testenv.RequireRoot(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	cfg := testConfig(t)
	cfg.Web.ListenAddresses = []string{taken.Addr().String()}
	cfg.Accounting.Mode = "bpf"
	core, logs := observer.New(zap.DebugLevel)
	c := newComponents(zap.New(core))
	before := heldPrograms(t, os.Getpid())
	start := time.Now()
	err = build(cfg, c)
	took := time.Since(start)
	var loaded []ebpf.ProgramID
	for id := range heldPrograms(t, os.Getpid()) {
		if !before[id] {
			loaded = append(loaded, id)
		}
	}
	c.close()
	if err == nil || !strings.Contains(err.Error(), "web.listen-address") {
		t.Fatalf("build with a taken port: %v, want an error naming web.listen-address", err)
	}
	if len(loaded) != 0 {
		t.Errorf("%d BPF programs loaded before the port was checked", len(loaded))
	}
	if n := logs.FilterMessage("accounting mode").Len(); n != 0 {
		t.Errorf("accounting opened (%d log lines) before the port was checked", n)
	}
	if took > time.Second {
		t.Errorf("start-up took %v to fail on a taken port, want < 1s", took)
	}
}
