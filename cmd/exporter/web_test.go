package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/wattrace/wattrace/pkg/snapshot"
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
	mux, err := newMux(cfg, prometheus.NewRegistry(), h, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newWebServer(cfg, mux, h, newSlogLogger(zap.NewNop(), "web"))
	if err != nil {
		t.Fatal(err)
	}
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
