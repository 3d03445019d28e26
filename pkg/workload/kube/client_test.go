package kube

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const (
	webUID    = "8f3e6a1c-2b4d-4e5f-9a7b-1c2d3e4f5a6b"
	staticUID = "5d0a3bba6b8f0e9b0b6e4e9d1e5c2f7a"
	batchUID  = "1b2c3d4e-5f60-4718-92a3-b4c5d6e7f809"
	token     = "eyJhbGciOiJSUzI1NiJ9.test-token"
)

func fixture(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var wantWeb = Pod{
	UID: webUID, Name: "web-0", Namespace: "shop", QoS: "burstable",
	Containers: map[string]Container{
		"3f1c9a2b7d4e5f6071829a4b5c6d7e8f90112233445566778899aabbccddeeff": {Name: "nginx", Runtime: "containerd"},
		"ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100": {Name: "nginx", Runtime: "containerd"},
		"a0b1c2d3e4f5061728394a5b6c7d8e9f00112233445566778899aabbccddee01": {Name: "exporter", Runtime: "containerd"},
		"11aa22bb33cc44dd55ee66ff77008899aabbccddeeff00112233445566778899": {Name: "init-config", Runtime: "containerd"},
	},
}

func TestDecodePods(t *testing.T) {
	pods, err := decodePods(strings.NewReader(string(fixture(t))))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Pod{
		webUID: wantWeb,
		staticUID: {UID: staticUID, Name: "kube-apiserver-worker-1", Namespace: "kube-system", QoS: "burstable",
			Containers: map[string]Container{"b0c1d2e3f405162738495a6b7c8d9e0f11223344556677889900aabbccddee02": {Name: "kube-apiserver", Runtime: "crio"}}},
		batchUID: {UID: batchUID, Name: "batch-job-x7k2p", Namespace: "etl", QoS: "besteffort", Containers: map[string]Container{}},
	}
	if !reflect.DeepEqual(pods, want) {
		t.Errorf("decodePods =\n%+v\nwant\n%+v", pods, want)
	}
}

func TestDecodePodsMirror(t *testing.T) {
	// The API server's copy of a static pod has its own uid; the cgroup
	// carries the kubelet's, which the mirror annotation holds.
	pods, err := decodePods(strings.NewReader(`{"items":[{"metadata":{"uid":"c0ffee00-0000-4000-8000-000000000001","name":"etcd-cp","namespace":"kube-system",
		"annotations":{"kubernetes.io/config.mirror":"` + staticUID + `"}},"status":{"qosClass":"Burstable"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := pods[staticUID]; !ok || p.Name != "etcd-cp" || p.UID != "c0ffee00-0000-4000-8000-000000000001" {
		t.Errorf("mirror lookup = %+v, %v", p, ok)
	}
	if _, err := decodePods(strings.NewReader(`{"items":[`)); err == nil || !strings.Contains(err.Error(), "decode pod list") {
		t.Errorf("truncated list: err = %v", err)
	}
}

// kubelet is a TLS server that checks the bearer token like the kubelet's
// authenticator does and serves the body.
func kubelet(t *testing.T, body func() []byte) (*httptest.Server, Config) {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/pods" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body())
	}))
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	tok := filepath.Join(dir, "token")
	if err := os.WriteFile(tok, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return srv, Config{URL: srv.URL + "/pods", TokenFile: tok, CAFile: ca, Refresh: time.Hour, MinRefresh: 20 * time.Millisecond, Timeout: 2 * time.Second}
}

func start(t *testing.T, cfg Config) *Client {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { c.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func eventually(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestClientTLSBearer(t *testing.T) {
	body := fixture(t)
	_, cfg := kubelet(t, func() []byte { return body })
	c := start(t, cfg)
	eventually(t, "a refresh", func() bool { return c.Status().Refreshes > 0 })
	p, ok := c.Pod(webUID)
	if !ok || !reflect.DeepEqual(p, wantWeb) {
		t.Errorf("Pod(web) = %+v, %v", p, ok)
	}
	st := c.Status()
	if st.Pods != 3 || st.Errors != 0 || st.LastError != nil || st.LastSuccess.IsZero() {
		t.Errorf("Status = %+v", st)
	}
}

func TestClientWrongToken(t *testing.T) {
	_, cfg := kubelet(t, func() []byte { return fixture(t) })
	if err := os.WriteFile(cfg.TokenFile, []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := start(t, cfg)
	eventually(t, "an error", func() bool { return c.Status().Errors > 0 })
	st := c.Status()
	if st.LastError == nil || !strings.Contains(st.LastError.Error(), "401 Unauthorized") || st.Refreshes != 0 {
		t.Errorf("Status = %+v", st)
	}
	// The token is re-read: a rotated token is picked up.
	if err := os.WriteFile(cfg.TokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	eventually(t, "web-0 after rotation", func() bool { _, ok := c.Pod(webUID); return ok })
	if st := c.Status(); st.LastError != nil {
		t.Errorf("LastError after success = %v", st.LastError)
	}
}

func TestClientRejectsUnknownCA(t *testing.T) {
	_, cfg := kubelet(t, func() []byte { return fixture(t) })
	cfg.CAFile = ""
	c := start(t, cfg)
	eventually(t, "an error", func() bool { return c.Status().Errors > 0 })
	if err := c.Status().LastError; err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("LastError = %v, want a certificate error", err)
	}
}

// TestClientSlowKubelet: a kubelet that does not answer must not block
// lookups, and the request must time out.
func TestClientSlowKubelet(t *testing.T) {
	release := make(chan struct{})
	srv, cfg := kubelet(t, func() []byte { <-release; return nil })
	defer close(release) // before srv.Close (Cleanup), which waits for handlers
	_ = srv
	cfg.Timeout = 300 * time.Millisecond
	c := start(t, cfg)
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		if _, ok := c.Pod(webUID); ok {
			t.Fatal("pod known without a response")
		}
		if d := time.Since(t0); d > 50*time.Millisecond {
			t.Fatalf("Pod blocked for %v", d)
		}
		time.Sleep(10 * time.Millisecond)
	}
	eventually(t, "the timeout", func() bool { return c.Status().Errors > 0 })
	if err := c.Status().LastError; err == nil || !strings.Contains(err.Error(), "deadline exceeded") {
		t.Errorf("LastError = %v", err)
	}
}

func TestClientKubeletDown(t *testing.T) {
	srv, cfg := kubelet(t, func() []byte { return fixture(t) })
	srv.Close()
	c := start(t, cfg)
	eventually(t, "an error", func() bool { return c.Status().Errors > 0 })
	if _, ok := c.Pod(webUID); ok {
		t.Error("pod known with the kubelet down")
	}
	if err := c.Status().LastError; err == nil || !strings.Contains(err.Error(), "kube: get pods") {
		t.Errorf("LastError = %v", err)
	}
}

// TestClientRefreshOnUnknown: a pod that appears after the first list is
// fetched on the first lookup that misses, without waiting for the period.
func TestClientRefreshOnUnknown(t *testing.T) {
	var served atomic.Int32
	later := fixture(t)
	_, cfg := kubelet(t, func() []byte {
		if served.Add(1) == 1 {
			return []byte(`{"kind":"PodList","apiVersion":"v1","items":[]}`)
		}
		return later
	})
	c := start(t, cfg)
	eventually(t, "the first list", func() bool { return c.Status().Refreshes == 1 })
	eventually(t, "web-0", func() bool { _, ok := c.Pod(webUID); return ok })
	// Lookups that miss (this uid is in no list) are rate-limited: far
	// fewer refreshes than lookups.
	for i := 0; i < 200; i++ {
		c.Pod("00000000-0000-4000-8000-000000000000")
		time.Sleep(time.Millisecond)
	}
	if n := served.Load(); n > 20 {
		t.Errorf("%d requests for 200 missing lookups with MinRefresh 20ms", n)
	}
}

func TestClientReadOnlyPort(t *testing.T) {
	body := fixture(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			t.Errorf("token sent to the read-only port")
		}
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	c := start(t, Config{URL: srv.URL + "/pods", Refresh: time.Hour})
	eventually(t, "static pod", func() bool { p, ok := c.Pod(staticUID); return ok && p.Name == "kube-apiserver-worker-1" })
}

func TestNewErrors(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("empty URL accepted")
	}
	if _, err := New(Config{URL: "https://x/pods", CAFile: "/nonexistent/ca.crt"}); err == nil || !strings.Contains(err.Error(), "read CA") {
		t.Errorf("missing CA: err = %v", err)
	}
}
