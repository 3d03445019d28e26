package acct

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/access"
)

// TestMain lets the hostile test run acct as a process of its own, so the
// runtime reads GODEBUG and the environment as it would for the real
// command.
func TestMain(m *testing.M) {
	if os.Getenv("WATTRACE_ACCT_TEST_RUN") == "1" {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr,
			Env{User: os.Getenv("WATTRACE_ACCT_TEST_USER"), Getenv: os.Getenv, Now: time.Now, Location: time.UTC}))
	}
	os.Exit(m.Run())
}

var credRE = regexp.MustCompile(`MUNGE:[A-Za-z0-9+/=]+:`)

// alice's acct runs in an environment an attacker chose: GODEBUG prints
// HTTP/2 frames and headers, HTTPS_PROXY and HTTP_PROXY point at the
// attacker's listener, SSL_KEYLOGFILE asks for TLS keys, and --url and
// the configuration point at the attacker's TLS server, which alice's acct
// trusts. Everything the attacker gets (his server's requests, the
// proxy's bytes, the key log, the debug output) is scanned for
// credentials: there is only the one made for his URL and that request,
// and replaying it to the real server, as is or naming alice or carol, is
// refused.
func TestHostileEnvironment(t *testing.T) {
	realURL, munge := server(t)
	var mu sync.Mutex
	type captured struct{ auth, method, uri string }
	var got []captured
	attacker := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, captured{r.Header.Get("Authorization"), r.Method, r.URL.RequestURI()})
		mu.Unlock()
		_, _ = io.WriteString(w, `{"status":"success","data":[]}`)
	}))
	attacker.EnableHTTP2 = true
	attacker.StartTLS()
	defer attacker.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "attacker-ca.pem")
	writeTest(t, ca, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: attacker.Certificate().Raw})))
	cfg := filepath.Join(dir, "acct.yaml")
	writeTest(t, cfg, "url: "+attacker.URL+"\nca_file: "+ca+"\nmunge: "+munge+"\n")
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	var proxied strings.Builder
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
			b, _ := io.ReadAll(io.LimitReader(c, 1<<16))
			mu.Lock()
			proxied.Write(b)
			mu.Unlock()
			c.Close()
		}
	}()
	keylog := filepath.Join(dir, "keys.log")
	cmd := exec.Command(os.Args[0], "--config", cfg, "--url", attacker.URL, "--starttime=now-2d")
	cmd.Env = append(os.Environ(), "WATTRACE_ACCT_TEST_RUN=1", "WATTRACE_ACCT_TEST_USER=alice", "FAKE_MUNGE_UID="+uids["alice"],
		"GODEBUG=http2debug=2", "HTTPS_PROXY=http://"+proxy.Addr().String(), "HTTP_PROXY=http://"+proxy.Addr().String(),
		"SSL_KEYLOGFILE="+keylog, "WATTRACE_API_URL="+attacker.URL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("acct against the attacker's server: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "http2:") {
		t.Errorf("GODEBUG=http2debug=2 printed nothing: the test would not see what it leaks\n%s", out)
	}
	keys, _ := os.ReadFile(keylog)
	mu.Lock()
	loot := string(out) + string(keys) + proxied.String()
	for _, c := range got {
		loot += "\n" + c.auth
	}
	reqs := got
	mu.Unlock()
	if len(reqs) != 1 {
		t.Fatalf("the attacker's server saw %d requests, want acct's one", len(reqs))
	}
	if proxied.Len() != 0 || len(keys) != 0 {
		t.Errorf("the proxy got %d bytes, the key log %d: acct must use neither", proxied.Len(), len(keys))
	}
	creds := map[string]bool{}
	for _, c := range credRE.FindAllString(loot, -1) {
		creds[c] = true
	}
	if len(creds) != 1 || !strings.HasPrefix(reqs[0].auth, "MUNGE ") || !creds[strings.TrimPrefix(reqs[0].auth, "MUNGE ")] {
		t.Fatalf("credentials in the loot: %d, request's %q; want the one MUNGE credential acct sent", len(creds), reqs[0].auth)
	}
	// What the fake credential says: made for the attacker's URL.
	cred := strings.TrimPrefix(reqs[0].auth, "MUNGE ")
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimSuffix(strings.TrimPrefix(cred, "MUNGE:"), ":"))
	_, payload, _ := strings.Cut(string(raw), "\n\n")
	var p access.MungePayload
	if err := json.Unmarshal([]byte(payload), &p); err != nil {
		t.Fatalf("payload %q: %v", payload, err)
	}
	want, _ := access.Audience(attacker.URL)
	if p.Audience != want || p.Method != "GET" || p.Path != reqs[0].uri {
		t.Errorf("payload %+v, want audience %s and the request %s", p, want, reqs[0].uri)
	}
	// Replay to the real server: as is, and naming alice or carol.
	for _, user := range []string{"", "alice", "carol"} {
		req, _ := http.NewRequest(http.MethodGet, realURL+reqs[0].uri, nil)
		req.Header.Set("Authorization", reqs[0].auth)
		if user != "" {
			req.Header.Set("X-Grafana-User", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 && resp.StatusCode != 403 {
			t.Errorf("replaying alice's credential to the real server (header %q): %d %s", user, resp.StatusCode, b)
		} else {
			t.Logf("replay (header %q): %d %s", user, resp.StatusCode, strings.TrimSpace(string(b)))
		}
	}
}

func writeTest(t *testing.T, p, body string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
}
