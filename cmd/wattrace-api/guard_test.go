package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/unitstest"
	"github.com/wattrace/wattrace/pkg/units"
)

// TestGuardConfig: the guard's keys from a file, the environment and
// flags; bad ones stop start-up naming the key.
func TestGuardConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yml")
	os.WriteFile(file, []byte(`
tsdb.url: http://tsdb:9090
store.path: `+filepath.Join(dir, "u.db")+`
guard:
  upstream: http://tsdb:9090/prometheus
  public: [wattrace_node_.*]
  cluster-label: cluster
  max-query-length: 1000
`), 0o644)
	c := must(t, "--config.file", file)
	g := c.Guard
	if g.Upstream != "http://tsdb:9090/prometheus" || len(g.Public) != 1 || g.ClusterLabel != "cluster" || g.MaxQueryLength != 1000 ||
		len(g.rules) != 5 || len(g.public) != 1 || g.Timeout != 2*time.Minute || g.ScopesTTL != time.Minute {
		t.Errorf("from the file: %+v", g)
	}
	t.Setenv("WATTRACE_API_GUARD_UPSTREAM", "http://env:9090")
	t.Setenv("WATTRACE_API_GUARD_FAMILIES", "wattrace_job_.*=uid:user")
	c = must(t, "--config.file", file, "--guard.timeout=10s")
	if c.Guard.Upstream != "http://env:9090" || len(c.Guard.rules) != 1 || c.Guard.rules[0].Label != "uid" || c.Guard.Timeout != 10*time.Second {
		t.Errorf("environment and flag: %+v", c.Guard)
	}
	base := []string{"--tsdb.url=http://tsdb:9090", "--store.path=" + filepath.Join(dir, "u.db")}
	for key, arg := range map[string]string{
		KeyGuardUpstream:       "--guard.upstream=http://user:secret@tsdb:9090",
		KeyGuardFamilies:       "--guard.families=wattrace_job_.*=user:everyone",
		KeyGuardPublic:         "--guard.public=wattrace_(node",
		KeyGuardClusterLabel:   "--guard.cluster-label=a-b",
		KeyGuardMaxQueryLength: "--guard.max-query-length=0",
		KeyGuardTimeout:        "--guard.timeout=0s",
	} {
		args := append(slices.Clone(base), arg)
		if key != KeyGuardUpstream {
			args = append(args, "--guard.upstream=http://tsdb:9090")
		}
		_, err := Load(args)
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", arg, err, key)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: the error shows the password: %v", arg, err)
		}
	}
}

// TestGuardServed runs the server with the guard on: /tsdb/api/v1/… is
// served on the API's listener, believes the API's trusted proxies, scopes
// with the store's projects and VMs, and counts on /metrics.
func TestGuardServed(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	tsdb := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = r.ParseForm()
		if strings.HasSuffix(r.URL.Path, "/api/v1/query") && r.URL.Path != "/api/v1/query" {
			mu.Lock()
			seen = append(seen, r.PostForm.Get("query"))
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
	}))
	defer tsdb.Close()
	now := time.Now()
	us := []units.Unit{
		{Cluster: "c1", Kind: units.KindPod, ID: "p1", User: "alice", Project: "proj_a", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c1", Kind: units.KindVM, ID: "vm-a", User: "alice", Project: "proj_a", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c1", Kind: units.KindVM, ID: "vm-b", User: "bob", Project: "proj_b", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c2", Kind: units.KindVM, ID: "vm-c2", User: "alice", Project: "proj_x", Start: now.Add(-time.Hour), Status: units.StatusRunning},
	}
	st := unitstest.Store(t, us)
	scopes := storeScopes{r: st, cluster: "c1"}
	ctx := context.Background()
	if ps, err := scopes.Projects(ctx, "alice"); err != nil || strings.Join(ps, ",") != "proj_a" {
		t.Errorf("alice's projects: %v %v", ps, err)
	}
	if vms, err := scopes.VMs(ctx, "alice"); err != nil || strings.Join(vms, ",") != "vm-a" {
		t.Errorf("alice's VMs: %v %v", vms, err)
	}

	dir := t.TempDir()
	port := testenv.FreePort(t)
	cfg, err := Load([]string{"--tsdb.url=" + tsdb.URL, "--store.path=" + filepath.Join(dir, "units.db"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--slurm.source=none", "--cluster=c1",
		"--api.trusted-proxies=127.0.0.1", "--api.admins=root", "--guard.upstream=" + tsdb.URL + "/prom", "--guard.cluster-label=cluster"})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	s, err := build(runCtx, cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.store.UpsertJobs(ctx, "test", now, us); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		s.Close()
	}()
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	ask := func(path, user string) (int, string) {
		req, _ := http.NewRequest("GET", base+path, nil)
		if user != "" {
			req.Header.Set("X-Grafana-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, b := ask("/tsdb/api/v1/query?query="+url.QueryEscape("wattrace_job_a or wattrace_pod_b"), "alice"); code != 200 {
		t.Fatalf("alice: %d %s", code, b)
	}
	mu.Lock()
	got := slices.Clone(seen)
	mu.Unlock()
	want := `wattrace_job_a{cluster="c1",user="alice"} or wattrace_pod_b{cluster="c1",namespace=~"proj_a"}`
	if len(got) != 1 || got[0] != want {
		t.Errorf("forwarded %q, want %q", got, want)
	}
	if code, b := ask("/tsdb/api/v1/query?query=up", "alice"); code != 403 || !strings.Contains(b, `"errorType":"forbidden"`) {
		t.Errorf("alice, up: %d %s", code, b)
	}
	if code, _ := ask("/tsdb/api/v1/query?query=up", ""); code != 401 {
		t.Errorf("nobody: %d", code)
	}
	if code, b := ask("/tsdb/api/v1/status/config", "root"); code != 404 || !strings.Contains(b, `"status":"error"`) {
		t.Errorf("status/config: %d %s", code, b)
	}
	code, metrics := ask("/metrics", "")
	for _, w := range []string{`wattrace_api_guard_requests_total{endpoint="query",outcome="ok"} 1`, `wattrace_api_guard_requests_total{endpoint="query",outcome="forbidden"} 1`,
		`wattrace_api_guard_upstream_duration_seconds_count{endpoint="query"} 1`} {
		if code != 200 || !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	testenv.Promlint(t, []byte(metrics))
}
