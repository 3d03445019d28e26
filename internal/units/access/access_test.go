package access

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

const header = "X-Grafana-User"

func hash(t *testing.T, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func testAccess(t *testing.T) *Access {
	t.Helper()
	basic, err := NewBasic(map[string]string{"grafana": hash(t, "graf-pw"), "acct": hash(t, "acct-pw")})
	if err != nil {
		t.Fatal(err)
	}
	return &Access{
		UserHeader:      header,
		TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Proxies:         []string{"grafana", "grafana-cert"},
		Admins:          []string{"carol"},
		Tokens:          map[string]string{HashToken("tok-alice"): "alice", HashToken("tok-grafana"): "grafana"},
		Basic:           basic,
	}
}

func withCert(r *http.Request, cn string) *http.Request {
	r.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: cn}}}}}
	return r
}

// Each credential names one principal; only proxies (api.proxies, trusted
// networks) may name another user in the header, and must.
func TestIdentify(t *testing.T) {
	a := testAccess(t)
	const trusted, untrusted = "10.1.2.3:4000", "192.0.2.7:4000"
	for _, c := range []struct {
		name   string
		remote string
		auth   string // Authorization
		cert   string // verified client certificate CN
		user   []string
		// want: the caller's user and method, or the status.
		wantUser, wantMethod, wantPrincipal string
		wantAdmin                           bool
		status                              int
	}{
		{name: "nothing", remote: untrusted, status: 401},
		{name: "forged header from anywhere", remote: untrusted, user: []string{"alice"}, status: 403},
		{name: "trusted network names the user", remote: trusted, user: []string{"alice"}, wantUser: "alice", wantMethod: "network", wantPrincipal: "10.1.2.3"},
		{name: "trusted network without header", remote: trusted, status: 401},
		{name: "token is its user", remote: untrusted, auth: "Bearer tok-alice", wantUser: "alice", wantMethod: "token", wantPrincipal: "alice"},
		{name: "token naming itself in the header", remote: untrusted, auth: "Bearer tok-alice", user: []string{"alice"}, wantUser: "alice", wantMethod: "token", wantPrincipal: "alice"},
		{name: "token claiming another user", remote: untrusted, auth: "Bearer tok-alice", user: []string{"carol"}, status: 403},
		{name: "token claiming another user from a trusted network", remote: trusted, auth: "Bearer tok-alice", user: []string{"carol"}, status: 403},
		{name: "token of a user called like a proxy", remote: untrusted, auth: "Bearer tok-grafana", user: []string{"alice"}, status: 403},
		{name: "unknown token", remote: trusted, auth: "Bearer nope", user: []string{"alice"}, status: 401},
		{name: "basic proxy names the user", remote: untrusted, auth: basicAuth("grafana", "graf-pw"), user: []string{"carol"}, wantUser: "carol", wantAdmin: true, wantMethod: "basic", wantPrincipal: "grafana"},
		{name: "basic proxy without header", remote: untrusted, auth: basicAuth("grafana", "graf-pw"), status: 403},
		{name: "basic non-proxy claiming alice", remote: untrusted, auth: basicAuth("acct", "acct-pw"), user: []string{"alice"}, status: 403},
		{name: "basic non-proxy is itself", remote: untrusted, auth: basicAuth("acct", "acct-pw"), wantUser: "acct", wantMethod: "basic", wantPrincipal: "acct"},
		{name: "basic wrong password", remote: trusted, auth: basicAuth("grafana", "nope"), user: []string{"alice"}, status: 401},
		{name: "basic unknown user", remote: untrusted, auth: basicAuth("mallory", "graf-pw"), user: []string{"alice"}, status: 401},
		{name: "certificate proxy names the user", remote: untrusted, cert: "grafana-cert", user: []string{"alice"}, wantUser: "alice", wantMethod: "cert", wantPrincipal: "grafana-cert"},
		{name: "certificate of a user claiming another", remote: untrusted, cert: "bob", user: []string{"alice"}, status: 403},
		{name: "certificate of a user", remote: untrusted, cert: "bob", wantUser: "bob", wantMethod: "cert", wantPrincipal: "bob"},
		{name: "certificate without CN", remote: untrusted, cert: "", user: []string{"alice"}, status: 401},
		{name: "MUNGE not enabled", remote: trusted, auth: "MUNGE MUNGE:abc:", user: []string{"alice"}, status: 401},
		{name: "unknown scheme", remote: trusted, auth: "Digest x", user: []string{"alice"}, status: 401},
		{name: "two user headers", remote: trusted, user: []string{"alice", "carol"}, status: 400},
		{name: "invalid user from a proxy", remote: trusted, user: []string{"-rf"}, status: 400},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/api/v1/units", nil)
			r.RemoteAddr = c.remote
			if c.auth != "" {
				r.Header.Set("Authorization", c.auth)
			}
			if c.cert != "" || strings.Contains(c.name, "without CN") {
				withCert(r, c.cert)
			}
			for _, u := range c.user {
				r.Header.Add(header, u)
			}
			got, err := a.Identify(r)
			if c.status != 0 {
				e, ok := err.(*Error)
				if !ok || e.HTTPStatus() != c.status || e.Msg == "" {
					t.Fatalf("got %+v, %v; want status %d", got, err, c.status)
				}
				return
			}
			want := Caller{User: c.wantUser, Admin: c.wantAdmin, Principal: c.wantPrincipal, Method: c.wantMethod}
			if err != nil || got != want {
				t.Fatalf("got %+v, %v; want %+v", got, err, want)
			}
		})
	}
}

func basicAuth(user, pw string) string {
	r, _ := http.NewRequest(http.MethodGet, "/", nil)
	r.SetBasicAuth(user, pw)
	return r.Header.Get("Authorization")
}

// Two Authorization headers are two credentials: refused, not the first
// one believed.
func TestTwoCredentials(t *testing.T) {
	a := testAccess(t)
	r := httptest.NewRequest(http.MethodGet, "/api/v1/units", nil)
	r.Header.Add("Authorization", "Bearer tok-alice")
	r.Header.Add("Authorization", basicAuth("grafana", "graf-pw"))
	r.Header.Set(header, "carol")
	if c, err := a.Identify(r); err == nil {
		t.Fatalf("two credentials: %+v", c)
	}
}

func TestBasicCache(t *testing.T) {
	b, err := NewBasic(map[string]string{"u": hash(t, "pw")})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if !b.Check("u", "pw") || b.Check("u", "pw2") || b.Check("v", "pw") {
			t.Fatal("wrong answer")
		}
	}
	if len(b.ok) != 1 {
		t.Errorf("cache holds %d entries, want the one success", len(b.ok))
	}
	if _, err := NewBasic(map[string]string{"u": "plain"}); err == nil || !strings.Contains(err.Error(), `"u"`) {
		t.Errorf("a plain-text password: %v", err)
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ body, err string }{
		{"alice: " + HashToken("a") + "\nbob: " + strings.ToUpper(HashToken("b")) + "\n", ""},
		{"alice: abc\n", "want a user name and a hex SHA-256"},
		{"alice: " + HashToken("a") + "\nbob: " + HashToken("a") + "\n", "share a token"},
	} {
		p := dir + "/tokens.yaml"
		writeFile(t, p, c.body, 0o644)
		m, err := LoadTokens(p)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "api.tokens-file") {
				t.Errorf("%q: %v", c.body, err)
			}
			continue
		}
		if err != nil || m[HashToken("a")] != "alice" || m[HashToken("b")] != "bob" {
			t.Errorf("%q: %v %v", c.body, m, err)
		}
	}
}
