package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"golang.org/x/crypto/bcrypt"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/access"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// selfSigned writes a certificate and key for 127.0.0.1 into dir.
func selfSigned(t *testing.T, dir string) *x509.CertPool {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "wattrace-api"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	writeTestFile(t, filepath.Join(dir, "cert.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeTestFile(t, filepath.Join(dir, "key.pem"), string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})))
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return pool
}

func writeTestFile(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}

func bcryptOf(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

// With basic_auth_users in the web config (and TLS with relative paths),
// exporter-toolkit does TLS only: /health needs no credential, bearer
// tokens work beside basic auth, the proxy principal grafana names the
// user, and a basic-auth user that is not a proxy cannot.
func TestBasicAuthBesideHealthAndTokens(t *testing.T) {
	dir := t.TempDir()
	pool := selfSigned(t, dir)
	writeTestFile(t, filepath.Join(dir, "web.yml"), fmt.Sprintf(`tls_server_config:
  cert_file: cert.pem
  key_file: key.pem
basic_auth_users:
  grafana: %s
  acct: %s
`, bcryptOf(t, "graf-pw"), bcryptOf(t, "acct-pw")))
	writeTestFile(t, filepath.Join(dir, "tokens.yml"), "alice: "+access.HashToken("tok-alice")+"\n")
	port := testenv.FreePort(t)
	cfg, err := Load([]string{"--tsdb.url=http://127.0.0.1:1", "--store.path=" + filepath.Join(dir, "units.db"),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", port), "--slurm.source=none", "--cluster=c1",
		"--web.config.file=" + filepath.Join(dir, "web.yml"), "--api.proxies=grafana", "--api.admins=carol",
		"--api.tokens-file=" + filepath.Join(dir, "tokens.yml")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s, err := build(ctx, cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		s.Close()
	}()
	start := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := s.store.UpsertJobs(ctx, "", start, []units.Unit{
		{Cluster: "c1", Kind: units.KindJob, ID: "1", User: "alice", Project: "p", Start: start, End: start.Add(time.Hour), State: "COMPLETED"},
		{Cluster: "c1", Kind: units.KindJob, ID: "2", User: "bob", Project: "p", Start: start, End: start.Add(time.Hour), State: "COMPLETED"},
	}); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	base := fmt.Sprintf("https://127.0.0.1:%d", port)
	get := func(path string, set func(*http.Request)) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		if set != nil {
			set(req)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var code int
	var body string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, base+"/health", nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if code, body = get("/health", nil); code != 200 || !strings.Contains(body, `"store":"ok"`) {
		t.Errorf("/health without credentials: %d %s", code, body)
	}
	const list = "/api/v1/units?from=2026-10-30T00:00:00Z&to=2026-11-20T00:00:00Z&fields=id,user"
	for _, c := range []struct {
		name string
		set  func(*http.Request)
		code int
		ids  string
	}{
		{"no credential", nil, 401, ""},
		{"a header alone", func(r *http.Request) { r.Header.Set("X-Grafana-User", "alice") }, 403, ""},
		{"token", func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok-alice") }, 200, "1"},
		{"token naming carol", func(r *http.Request) {
			r.Header.Set("Authorization", "Bearer tok-alice")
			r.Header.Set("X-Grafana-User", "carol")
		}, 403, ""},
		{"grafana names alice", func(r *http.Request) { r.SetBasicAuth("grafana", "graf-pw"); r.Header.Set("X-Grafana-User", "alice") }, 200, "1"},
		{"grafana names carol, an admin", func(r *http.Request) { r.SetBasicAuth("grafana", "graf-pw"); r.Header.Set("X-Grafana-User", "carol") }, 200, "1,2"},
		{"grafana without a user", func(r *http.Request) { r.SetBasicAuth("grafana", "graf-pw") }, 403, ""},
		{"grafana, wrong password", func(r *http.Request) { r.SetBasicAuth("grafana", "x"); r.Header.Set("X-Grafana-User", "alice") }, 401, ""},
		{"acct, not a proxy, names alice", func(r *http.Request) { r.SetBasicAuth("acct", "acct-pw"); r.Header.Set("X-Grafana-User", "alice") }, 403, ""},
	} {
		code, body := get(list, c.set)
		if code != c.code {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.code)
			continue
		}
		if c.code != 200 {
			continue
		}
		var env struct{ Data []units.Unit }
		if err := json.Unmarshal([]byte(body), &env); err != nil {
			t.Fatalf("%s: %v %s", c.name, err, body)
		}
		var ids []string
		for _, u := range env.Data {
			ids = append(ids, u.ID)
		}
		if got := strings.Join(ids, ","); got != c.ids && !(c.ids == "1,2" && got == "2,1") {
			t.Errorf("%s: units %q, want %q", c.name, got, c.ids)
		}
	}
}

// An unauthenticated /health says the store is down, not why: the error
// names hosts, users and paths.
func TestHealthHidesStoreError(t *testing.T) {
	st, err := store.Open(context.Background(), store.Config{Driver: store.SQLite, Path: filepath.Join(t.TempDir(), "secret-path-units.db")})
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	h, err := newAPIHandler(apiDeps{Reader: st, Access: API{UserHeader: "X-Grafana-User", MaxRange: time.Hour}, Log: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	resp, err := http.Get("http://" + l.Addr().String() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var env struct {
		Data map[string]any `json:"data"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 503 || env.Data["store"] != "down" || strings.Contains(string(b), "closed") || strings.Contains(string(b), "secret-path") {
		t.Errorf("/health with a closed store: %d %s", resp.StatusCode, b)
	}
}

// Each connection is bounded by the configured timeouts: an idle
// keep-alive connection, one holding 3 bytes of its next request and one
// that never finishes its headers are closed, while real requests still
// answer.
func TestConnectionTimeouts(t *testing.T) {
	cfg := must(t, "--tsdb.url=http://127.0.0.1:1", "--web.read-header-timeout=300ms", "--web.read-timeout=600ms",
		"--web.idle-timeout=400ms", "--web.write-timeout=2s")
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), cfg.Timeouts)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(l) }()
	defer srv.Close()
	const req = "GET / HTTP/1.1\r\nHost: x\r\n\r\n"
	// closedWithin sends first, reads one answer when answered, sends
	// then, and reports how long the server took to close.
	closedWithin := func(first string, answered bool, then string) (time.Duration, error) {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			return 0, err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, first); err != nil {
			return 0, err
		}
		br := bufio.NewReader(c)
		if answered {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				return 0, err
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != "ok" {
				return 0, fmt.Errorf("answer %q", b)
			}
		}
		if then != "" {
			if _, err := io.WriteString(c, then); err != nil {
				return 0, err
			}
		}
		t0 := time.Now()
		_, err = io.Copy(io.Discard, br)
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return 0, errors.New("still open after 5 s")
		}
		return time.Since(t0), nil
	}
	for _, c := range []struct {
		name     string
		first    string
		answered bool
		then     string
		limit    time.Duration
	}{
		{"idle keep-alive", req, true, "", 400 * time.Millisecond},
		{"3 bytes of the next request", req, true, "GET", 400 * time.Millisecond},
		{"headers never finished", "GET / HTTP/1.1\r\nHost: x\r\n", false, "", 300 * time.Millisecond},
	} {
		d, err := closedWithin(c.first, c.answered, c.then)
		if err != nil || d > c.limit+300*time.Millisecond {
			t.Errorf("%s: closed after %v (%v), want within %v", c.name, d, err, c.limit)
		} else {
			t.Logf("%s: closed after %v", c.name, d.Round(time.Millisecond))
		}
	}
	resp, err := http.Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "ok" {
		t.Errorf("a real request: %q", b)
	}
}

func TestIdentityConfigErrorsNameKeys(t *testing.T) {
	for args, key := range map[string]string{
		"--api.munge.enabled":         KeyAPIMungeAudiences,
		"--web.idle-timeout=0s":       KeyWebIdleTimeout,
		"--web.read-timeout=-1s":      KeyWebReadTimeout,
		"--web.read-header-timeout=0": KeyWebReadHeaderTimeout,
	} {
		_, err := Load([]string{"--tsdb.url=http://x:9090", args})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want an error naming %s", args, err, key)
		}
	}
	// A bad web config stops start-up naming web.config.file.
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "web.yml"), "basic_auth_users:\n  grafana: plain-text\n")
	cfg := must(t, "--tsdb.url=http://127.0.0.1:1", "--store.path="+filepath.Join(dir, "u.db"), "--slurm.source=none",
		"--web.listen-address=127.0.0.1:0", "--web.config.file="+filepath.Join(dir, "web.yml"))
	if s, err := build(context.Background(), cfg, zap.NewNop()); err == nil || !strings.Contains(err.Error(), KeyWebConfigFile) {
		if s != nil {
			s.Close()
		}
		t.Errorf("plain-text password: %v, want an error naming %s", err, KeyWebConfigFile)
	}
}

func testLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
