package proxy

import (
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

func newBMC(t *testing.T) (*httptest.Server, *[]string) {
	var got []string
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" target="+r.Header.Get("X-Redfish-Url")+" cookie="+r.Header.Get("Cookie"))
		w.Header().Set("X-Auth-Token", "tok")
		w.Header().Set("Set-Cookie", "bmc=1")
		w.Write([]byte(`{"ok":true}`))
	}))
	t.Cleanup(s.Close)
	return s, &got
}

func do(t *testing.T, h http.Handler, method, path string, hdr map[string]string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, "http://proxy"+path, strings.NewReader(`{"UserName":"u","Password":"p"}`))
	if strings.Contains(path, "%") || strings.Contains(path, "..") {
		req.URL, _ = url.Parse("http://proxy" + path)
		req.URL.RawPath = ""
		if u, err := url.Parse(path); err == nil {
			req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
		} else {
			req.URL.Path = path
		}
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func TestProxy(t *testing.T) {
	bmc, got := newBMC(t)
	p, err := New(Config{Allow: []string{"127.0.0.0/8", "bmc-*.mgmt"}, Nodes: map[string]string{"node1": bmc.URL}, Ports: []int{urlPort(t, bmc.URL)}})
	if err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"X-Redfish-Url": bmc.URL, "Cookie": "c=1"}
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		status       int
	}{
		{"GET", "/redfish/v1/Chassis/1U/EnvironmentMetrics", hdr, 200},
		{"GET", "/redfish/v1/Chassis/1U/Power", hdr, 200},
		{"GET", "/redfish/v1/Chassis/1U/Sensors/TotalPower", hdr, 200},
		{"GET", "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1/Metrics", hdr, 200},
		{"POST", "/redfish/v1/SessionService/Sessions", hdr, 200},
		{"DELETE", "/redfish/v1/SessionService/Sessions/42", hdr, 200},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Node": "node1"}, 200},
		// Refused paths and methods.
		{"GET", "/redfish/v1/AccountService/Accounts", hdr, 403},
		{"PATCH", "/redfish/v1/Chassis/1U/Power", hdr, 403},
		{"POST", "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", hdr, 403},
		{"GET", "/redfish/v1/Chassis/1U/Sensors/../../../AccountService", hdr, 403},
		{"GET", "/redfish/v1/Chassis/1U/Sensors/%2e%2e", hdr, 403},
		{"DELETE", "/redfish/v1/SessionService/Sessions", hdr, 403},
		// Refused targets.
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Url": "http://10.9.9.9"}, 403},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Url": "https://evil.example.com"}, 403},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Node": "node2"}, 403},
		// Malformed or missing target.
		{"GET", "/redfish/v1/Chassis/1U/Power", nil, 400},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Url": "127.0.0.1"}, 400},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Url": bmc.URL + "/redfish/v1/AccountService"}, 400},
		{"GET", "/redfish/v1/Chassis/1U/Power", map[string]string{"X-Redfish-Url": "http://user:pw@127.0.0.1"}, 400},
	} {
		rec := do(t, p, tc.method, tc.path, tc.hdr)
		if rec.Code != tc.status {
			t.Errorf("%s %s %v: %d %s, want %d", tc.method, tc.path, tc.hdr, rec.Code, rec.Body.String(), tc.status)
		}
		if rec.Code == 200 && (rec.Header().Get("X-Auth-Token") != "tok" || rec.Header().Get("Set-Cookie") != "") {
			t.Errorf("%s %s: response headers %v", tc.method, tc.path, rec.Header())
		}
	}
	if len(*got) != 7 {
		t.Fatalf("BMC saw %d requests, want the 7 allowed: %v", len(*got), *got)
	}
	for _, r := range *got {
		if !strings.HasSuffix(r, "target= cookie=") {
			t.Fatalf("the target header or a cookie was forwarded: %s", r)
		}
	}
}

func TestProxyConfig(t *testing.T) {
	for _, c := range []Config{
		{},
		{Allow: []string{"*"}},
		{Allow: []string{"10.0.0.0/33"}},
		{Allow: []string{"10.0.0.0/8"}, Nodes: map[string]string{"n": "https://192.168.1.1"}},
		{Allow: []string{"10.0.0.0/8"}, Nodes: map[string]string{"n": "not a url"}},
		{Allow: []string{"10.0.0.0/8"}, Nodes: map[string]string{"n": "https://10.0.0.1:22"}},
		{Allow: []string{"10.0.0.0/8"}, Ports: []int{0}},
		{Allow: []string{"10.0.0.0/8"}, Ports: []int{65536}},
	} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	p, _ := New(Config{Allow: []string{"10.0.0.0/8", "bmc-*.mgmt"}})
	for host, want := range map[string]bool{"10.1.2.3": true, "11.0.0.1": false, "bmc-17.mgmt": true, "BMC-17.MGMT": true, "bmc-17.mgmt.evil.com": false, "::ffff:10.0.0.1": true} {
		if p.allowedHost(host) != want {
			t.Errorf("allowedHost(%s) != %v", host, want)
		}
	}
}

func FuzzRequestChecks(f *testing.F) {
	f.Add("GET", "/redfish/v1/Chassis/1U/Power", "https://10.0.0.1")
	f.Add("GET", "/redfish/v1/Chassis/../AccountService", "http://bmc-1.mgmt:443")
	f.Fuzz(func(t *testing.T, method, path, target string) {
		if allowedRequest(method, path) && (strings.Contains(path, "..") || strings.Contains(path, "//")) {
			t.Fatalf("allowed %s %q", method, path)
		}
		if u, err := parseTarget(target); err == nil && (u.Path != "" || u.User != nil || u.Host == "") {
			t.Fatalf("target %q parsed to %v", target, u)
		}
	})
}

func urlPort(t *testing.T, raw string) int {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(u.Port())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// An allowed host is reachable only on the allowed ports
// (443 when none is configured), and nothing the far end sends on an error
// (a service banner, an error page) comes back through the proxy.
func TestProxyPortsAndNoEcho(t *testing.T) {
	bmc, got := newBMC(t)
	def, err := New(Config{Allow: []string{"127.0.0.0/8"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := do(t, def, "GET", "/redfish/v1/Chassis", map[string]string{"X-Redfish-Url": bmc.URL})
	if rec.Code != 403 || len(*got) != 0 {
		t.Fatalf("port %d with default ports: %d, BMC saw %d requests", urlPort(t, bmc.URL), rec.Code, len(*got))
	}
	for _, target := range []string{"http://127.0.0.1:22", "https://127.0.0.1:8443", "http://127.0.0.1"} {
		if rec := do(t, def, "GET", "/redfish/v1/Chassis", map[string]string{"X-Redfish-Url": target}); rec.Code != 403 {
			t.Errorf("%s: %d, want 403", target, rec.Code)
		}
	}

	// A non-HTTP service on an allowed port: its banner must not leak.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("SSH-2.0-OpenSSH_9.6 secret-banner\r\n"))
			c.Close()
		}
	}()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "internal admin page secret-banner", 500)
	}))
	t.Cleanup(page.Close)
	bannerURL := "http://" + ln.Addr().String()
	p, err := New(Config{Allow: []string{"127.0.0.0/8"}, Ports: []int{urlPort(t, bannerURL), urlPort(t, page.URL)}})
	if err != nil {
		t.Fatal(err)
	}
	for target, want := range map[string]int{bannerURL: 502, page.URL: 500} {
		rec := do(t, p, "GET", "/redfish/v1/Chassis", map[string]string{"X-Redfish-Url": target})
		if rec.Code != want || strings.Contains(rec.Body.String(), "secret") || strings.Contains(rec.Body.String(), "SSH") {
			t.Errorf("%s: %d %q, want %d without the upstream body", target, rec.Code, rec.Body.String(), want)
		}
	}
}
