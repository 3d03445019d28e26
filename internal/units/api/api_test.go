package api

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/wattrace/wattrace/internal/units/unitstest"
	"github.com/wattrace/wattrace/pkg/units"
)

func fixture() []units.Unit { return unitstest.Fixture(testNow) }

func newTestAPI(t testing.TB) http.Handler {
	t.Helper()
	store := unitstest.Store(t, fixture())
	a, err := New(store, Config{
		Access: Access{
			UserHeader:      DefaultUserHeader,
			TrustedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")},
			Admins:          []string{"carol"},
			Tokens:          map[string]string{HashToken("s3cret-alice"): "alice"},
		},
		MaxRange:     31 * 24 * time.Hour,
		DefaultRange: 7 * 24 * time.Hour,
		Now:          func() time.Time { return testNow },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return a.Handler()
}

type answer struct {
	code int
	env  struct {
		Status    string          `json:"status"`
		Data      json.RawMessage `json:"data"`
		ErrorType string          `json:"errorType"`
		Error     string          `json:"error"`
	}
	body string
}

// get asks h for target as user (no header when ""), from remote.
func get(t testing.TB, h http.Handler, target, user, remote string, hdr ...string) answer {
	t.Helper()
	r := httptest.NewRequest(http.MethodGet, "http://api"+target, nil)
	r.RemoteAddr = remote
	if user != "" {
		r.Header.Set(DefaultUserHeader, user)
	}
	// Add, not Set: a name given twice is sent twice (a request that
	// repeats the user header is one the API must refuse).
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	a := answer{code: w.Code, body: w.Body.String()}
	if err := json.Unmarshal(w.Body.Bytes(), &a.env); err != nil {
		t.Fatalf("%s: body is not JSON (%v): %q", target, err, a.body)
	}
	return a
}

const trusted, untrusted = "10.1.2.3:4000", "192.0.2.7:4000"

func ids(t testing.TB, a answer) string {
	t.Helper()
	var us []units.Unit
	if err := json.Unmarshal(a.env.Data, &us); err != nil {
		t.Fatalf("data %s: %v", a.env.Data, err)
	}
	var out []string
	for _, u := range us {
		out = append(out, u.ID)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func TestAccess(t *testing.T) {
	h := newTestAPI(t)
	cases := []struct {
		name, target, user, remote string
		hdr                        []string
		code                       int
		ids                        string
	}{
		{"alice lists her own", "/api/v1/units", "alice", trusted, nil, 200, "101 102"},
		{"bob lists his own", "/api/v1/units", "bob", trusted, nil, 200, "201"},
		{"admin sees all", "/api/v1/units", "carol", trusted, nil, 200, "101 102 201 301"},
		{"admin filters by user", "/api/v1/units?user=bob", "carol", trusted, nil, 200, "201"},
		{"alice asks for bob's list", "/api/v1/units?user=bob", "alice", trusted, nil, 403, ""},
		{"alice asks for herself", "/api/v1/units?user=alice", "alice", trusted, nil, 200, "101 102"},
		{"alice asks for bob's job", "/api/v1/units/201", "alice", trusted, nil, 403, ""},
		{"alice asks for her job", "/api/v1/units/101", "alice", trusted, nil, 200, ""},
		{"admin asks for bob's job", "/api/v1/units/201", "carol", trusted, nil, 200, ""},
		{"no such job", "/api/v1/units/999", "alice", trusted, nil, 404, ""},
		{"forged header, untrusted address", "/api/v1/units", "carol", untrusted, nil, 403, ""},
		{"forged header, IPv4-mapped untrusted", "/api/v1/units", "carol", "[::ffff:192.0.2.7]:1", nil, 403, ""},
		{"IPv6 loopback trusted", "/api/v1/units", "bob", "[::1]:1", nil, 200, "201"},
		{"no user header", "/api/v1/units", "", trusted, nil, 401, ""},
		{"two user headers", "/api/v1/units", "", trusted, []string{DefaultUserHeader, "alice", DefaultUserHeader, "carol"}, 400, ""},
		{"bad user name in header", "/api/v1/units", "al'ice", trusted, nil, 400, ""},
		{"bearer token from anywhere", "/api/v1/units", "", untrusted, []string{"Authorization", "Bearer s3cret-alice"}, 200, "101 102"},
		{"a token's user may not name another", "/api/v1/units", "carol", untrusted, []string{"Authorization", "Bearer s3cret-alice"}, 403, ""},
		{"a token's user may name herself", "/api/v1/units", "alice", untrusted, []string{"Authorization", "Bearer s3cret-alice"}, 200, "101 102"},
		{"wrong token", "/api/v1/units", "", untrusted, []string{"Authorization", "Bearer nope"}, 401, ""},
		{"basic auth not configured: refused", "/api/v1/units", "carol", untrusted, []string{"Authorization", "Basic Y2Fyb2w6eA=="}, 401, ""},
		{"alice verifies her jobs", "/api/v1/units/verify?id=101&id=102", "alice", trusted, nil, 200, ""},
		{"alice verifies bob's job", "/api/v1/units/verify?id=101,201", "alice", trusted, nil, 403, ""},
		{"alice verifies an unknown job", "/api/v1/units/verify?id=c1/job/999", "alice", trusted, nil, 403, ""},
		{"admin verifies for bob", "/api/v1/units/verify?id=201&user=bob", "carol", trusted, nil, 200, ""},
		{"admin verifies bob owns alice's", "/api/v1/units/verify?id=101&user=bob", "carol", trusted, nil, 403, ""},
		{"alice verifies for bob", "/api/v1/units/verify?id=201&user=bob", "alice", trusted, nil, 403, ""},
		{"alice's usage of bob", "/api/v1/usage?user=bob", "alice", trusted, nil, 403, ""},
		{"alice's usage of proj_b", "/api/v1/usage?project=proj_b", "alice", trusted, nil, 403, ""},
		{"alice's proj_a by user", "/api/v1/usage?project=proj_a&by=user", "alice", trusted, nil, 403, ""},
		{"alice's users of bob", "/api/v1/users?user=bob", "alice", trusted, nil, 403, ""},
		{"health needs no user", "/health", "", untrusted, nil, 200, ""},
		{"unknown path: JSON 404", "/api/v1/jobs", "alice", trusted, nil, 404, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := get(t, h, c.target, c.user, c.remote, c.hdr...)
			if a.code != c.code {
				t.Fatalf("%s as %q from %s: %d %s, want %d", c.target, c.user, c.remote, a.code, a.body, c.code)
			}
			if c.code != 200 {
				if a.env.Status != "error" || a.env.Error == "" || a.env.ErrorType == "" {
					t.Errorf("error envelope %s", a.body)
				}
				return
			}
			if a.env.Status != "success" {
				t.Errorf("status %q", a.env.Status)
			}
			if c.ids != "" {
				if got := ids(t, a); got != c.ids {
					t.Errorf("units %q, want %q", got, c.ids)
				}
			}
		})
	}
}

func TestFields(t *testing.T) {
	h := newTestAPI(t)
	a := get(t, h, "/api/v1/units?fields=id,figures&id=101", "alice", trusted)
	if a.code != 200 {
		t.Fatal(a.body)
	}
	var got []map[string]json.RawMessage
	if err := json.Unmarshal(a.env.Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("%d units: %s", len(got), a.env.Data)
	}
	var keys []string
	for k := range got[0] {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if strings.Join(keys, ",") != "figures,id" {
		t.Errorf("fields %v", keys)
	}
	var f units.Figures
	if err := json.Unmarshal(got[0]["figures"], &f); err != nil || f.Joules() != 39600 || f.CPUSeconds != 3600 {
		t.Errorf("figures %s: joules %v cpu %v (%v)", got[0]["figures"], f.Joules(), f.CPUSeconds, err)
	}
	// totals: package+dram once, the first provider's grams, wall time
	// and the range in milliseconds (end = now while running).
	a = get(t, h, "/api/v1/units?fields=id,totals", "alice", trusted)
	var tot []struct {
		ID     string
		Totals totals
	}
	if err := json.Unmarshal(a.env.Data, &tot); err != nil || len(tot) != 2 {
		t.Fatalf("%s: %v", a.env.Data, err)
	}
	sort.Slice(tot, func(i, j int) bool { return tot[i].ID < tot[j].ID })
	want := []totals{
		{energyTotals: energyTotals{Joules: 39600, KWh: 0.011, Grams: 0.5}, WallSeconds: 3600, CPUSeconds: 3600, GPUSeconds: 7200, GPUIdleSeconds: 1800, StartMs: testNow.Add(-6 * time.Hour).UnixMilli(), EndMs: testNow.Add(-5 * time.Hour).UnixMilli()},
		{energyTotals: energyTotals{Joules: 7920, KWh: 0.0022, Grams: 0.1}, WallSeconds: 4 * 3600, CPUSeconds: 720, StartMs: testNow.Add(-4 * time.Hour).UnixMilli(), EndMs: testNow.UnixMilli()},
	}
	for i, w := range want {
		g := tot[i].Totals
		if math.Abs(g.KWh-w.KWh) > 1e-12 || math.Abs(g.Grams-w.Grams) > 1e-12 {
			t.Errorf("%s: totals %+v, want %+v", tot[i].ID, g, w)
		}
		g.KWh, g.Grams, w.KWh, w.Grams = 0, 0, 0, 0
		if g != w {
			t.Errorf("%s: totals %+v, want %+v", tot[i].ID, g, w)
		}
	}
}

func TestRunningAndRange(t *testing.T) {
	h := newTestAPI(t)
	for q, want := range map[string]string{
		"running=true":  "102",
		"running=false": "101 201 301",
		// Only units that ran in the range: 101 ended at t0+1h.
		"from=" + testNow.Add(-285*time.Minute).Format(time.RFC3339): "102 201 301",
	} {
		a := get(t, h, "/api/v1/units?"+q, "carol", trusted)
		if a.code != 200 {
			t.Fatalf("%s: %s", q, a.body)
		}
		if got := ids(t, a); got != want {
			t.Errorf("%s: %q, want %q", q, got, want)
		}
	}
}

func TestUsageScoped(t *testing.T) {
	h := newTestAPI(t)
	type row struct {
		User, Project string
		Units         int64
		Figures       units.Figures
	}
	usage := func(q, user string) []row {
		a := get(t, h, "/api/v1/usage?"+q, user, trusted)
		if a.code != 200 {
			t.Fatalf("%s as %s: %s", q, user, a.body)
		}
		var rs []row
		if err := json.Unmarshal(a.env.Data, &rs); err != nil {
			t.Fatal(err)
		}
		return rs
	}
	// alice alone: her two jobs.
	rs := usage("", "alice")
	if len(rs) != 1 || rs[0].Units != 2 || rs[0].Figures.CPUSeconds != 3600+720 {
		t.Errorf("alice's usage %+v, want 2 units and 4320 CPU seconds", rs)
	}
	// alice's project: hers and carol's.
	rs = usage("project=proj_a", "alice")
	if len(rs) != 1 || rs[0].Units != 3 || rs[0].Figures.CPUSeconds != 3600+720+360 {
		t.Errorf("proj_a usage %+v, want 3 units and 4680 CPU seconds", rs)
	}
	// admin, by user.
	rs = usage("by=user", "carol")
	got := map[string]int64{}
	for _, r := range rs {
		got[r.User] += r.Units
	}
	if got["alice"] != 2 || got["bob"] != 1 || got["carol"] != 1 {
		t.Errorf("by user %v", got)
	}
}

func TestProjectsAndUsersScoped(t *testing.T) {
	h := newTestAPI(t)
	a := get(t, h, "/api/v1/projects", "alice", trusted)
	var ps []units.Project
	if err := json.Unmarshal(a.env.Data, &ps); err != nil || a.code != 200 {
		t.Fatal(a.body)
	}
	if len(ps) != 1 || ps[0].Name != "proj_a" || !slices.Equal(ps[0].Users, []string{"alice"}) {
		t.Errorf("alice's projects %+v, want proj_a with herself only", ps)
	}
	a = get(t, h, "/api/v1/users", "alice", trusted)
	var us []units.User
	if err := json.Unmarshal(a.env.Data, &us); err != nil || a.code != 200 {
		t.Fatal(a.body)
	}
	if len(us) != 1 || us[0].Name != "alice" {
		t.Errorf("alice's users %+v", us)
	}
	a = get(t, h, "/api/v1/users", "carol", trusted)
	if err := json.Unmarshal(a.env.Data, &us); err != nil {
		t.Fatal(err)
	}
	if len(us) != 3 {
		t.Errorf("admin's users %+v, want 3", us)
	}
}

// Bad input is a 400 with a message naming the problem, and the store is
// not asked.
func TestBadInput(t *testing.T) {
	h := newTestAPI(t)
	for _, c := range []struct{ target, want string }{
		{"/api/v1/units?user=alice'%20OR%20'1'='1", "invalid user"},
		{"/api/v1/units?project=a%3BDROP%20TABLE%20units", "invalid project"},
		{"/api/v1/units?cluster=%25", "invalid cluster"},
		{"/api/v1/units?kind=job%27--", "invalid kind"},
		{"/api/v1/units?from=yesterday", "invalid from"},
		{"/api/v1/units?to=1e999", "invalid to"},
		{"/api/v1/units?from=2026-11-20T00:00:00Z&to=2026-11-10T00:00:00Z", "not before"},
		{"/api/v1/units?from=2020-01-01T00:00:00Z", "longer than the maximum"},
		{"/api/v1/usage?from=2001-01-01T00:00:00Z&to=2026-01-01T00:00:00Z", "longer than the maximum"},
		{"/api/v1/units?fields=id,secret", "unknown field"},
		{"/api/v1/units?sort=id", "unknown parameter"},
		{"/api/v1/units?limit=-1", "invalid limit"},
		{"/api/v1/units?limit=99999999999999999999", "invalid limit"},
		{"/api/v1/units?running=yes%27", "invalid running"},
		{"/api/v1/units?user=%ff%fe", "invalid user"},
		{"/api/v1/units?from=1&from=2", "at most once"},
		{"/api/v1/units?%zz", "malformed query"},
		{"/api/v1/units?user=a;b", "malformed query"},
		{"/api/v1/usage?by=password", "invalid by"},
		{"/api/v1/usage?period=week", "invalid period"},
		{"/api/v1/units/1%27%3B--", "invalid unit id"},
		{"/api/v1/units/101?kind=batch", "invalid kind"},
		{"/api/v1/units/verify", "no unit"},
		{"/api/v1/units/verify?id=c1/batch/1", "invalid unit"},
		{"/api/v1/projects?cluster=a%20b", "invalid cluster"},
	} {
		a := get(t, h, c.target, "carol", trusted)
		if a.code != 400 || a.env.Status != "error" || a.env.ErrorType != "bad_data" || !strings.Contains(a.env.Error, c.want) {
			t.Errorf("%s: %d %s, want 400 bad_data with %q", c.target, a.code, strings.TrimSpace(a.body), c.want)
		}
	}
}

func TestOpenAPIServed(t *testing.T) {
	h := newTestAPI(t)
	r := httptest.NewRequest(http.MethodGet, "/api/v1/openapi.yaml", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != 200 || !strings.HasPrefix(w.Body.String(), "openapi: 3") {
		t.Fatalf("%d %.80s", w.Code, w.Body)
	}
	var doc struct {
		OpenAPI    string         `yaml:"openapi"`
		Paths      map[string]any `yaml:"paths"`
		Components struct {
			Schemas map[string]any `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Paths) != 8 || doc.Components.Schemas["Unit"] == nil {
		t.Fatalf("OpenAPI document: %v, %d paths", err, len(doc.Paths))
	}
	// fields= accepts what the document lists, and nothing else.
	if !strings.Contains(w.Body.String(), "enum: ["+strings.Join(fields, ", ")+"]") {
		t.Errorf("the document's fields enum is not %v", fields)
	}
	// Every route the mux serves is in the document.
	for _, p := range []string{"/health:", "/api/v1/units:", "/api/v1/units/{id}:", "/api/v1/units/verify:", "/api/v1/usage:", "/api/v1/projects:", "/api/v1/users:"} {
		if !strings.Contains(w.Body.String(), "\n  "+p) {
			t.Errorf("OpenAPI has no path %s", p)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	_, err := New(unitstest.Store(t, nil), Config{Access: Access{Admins: []string{"bad name"}}, MaxRange: time.Hour, DefaultRange: 2 * time.Hour}, nil)
	if err == nil || !strings.Contains(err.Error(), "api.admins") || !strings.Contains(err.Error(), "api.default-range") {
		t.Errorf("error %v, want api.admins and api.default-range named", err)
	}
	if _, err := ParseNetworks([]string{"10.0.0.0/8", "127.0.0.1", "not-a-net"}); err == nil || !strings.Contains(err.Error(), "api.trusted-proxies") {
		t.Errorf("ParseNetworks: %v", err)
	}
	ps, err := ParseNetworks([]string{"10.1.2.3/8", "::1"})
	if err != nil || ps[0].String() != "10.0.0.0/8" || ps[1].String() != "::1/128" {
		t.Errorf("ParseNetworks: %v %v", ps, err)
	}
}

// FuzzQuery: whatever the path under /api/v1/, query string and user
// header, the API answers JSON, never a 5xx, and an error has a message.
func FuzzQuery(f *testing.F) {
	for _, s := range []string{
		"", "user=alice", "user=alice'--", "from=2026-11-20T00:00:00Z&to=2026-11-21T00:00:00Z", "from=9e99",
		"to=-1", "from=2026-11-21T00:00:00Z&to=2026-11-20T00:00:00Z", "fields=id,figures", "fields=x",
		"kind=job&running=true", "limit=5&offset=2", "by=user&period=day", "%00", "id=1;--", "project=%27%22",
	} {
		f.Add("/api/v1/units", s, "alice")
		f.Add("/api/v1/usage", s, "carol")
		f.Add("/api/v1/units/verify", s, "alice")
	}
	f.Add("/api/v1/units/101", "kind=job", "al'ice")
	f.Add("/api/v1/projects", "user=bob", "")
	h := newTestAPI(f)
	f.Fuzz(func(t *testing.T, path, query, user string) {
		if !strings.HasPrefix(path, "/api/v1/") {
			path = "/api/v1/units"
		}
		r, err := http.NewRequest(http.MethodGet, "http://api/", nil)
		if err != nil {
			t.Fatal(err)
		}
		r.URL.Path, r.URL.RawQuery = path, query
		r.RemoteAddr = trusted
		if strings.ContainsAny(user, "\r\n\x00") {
			return // not a header value net/http would deliver
		}
		if user != "" {
			r.Header.Set(DefaultUserHeader, user)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%s?%s: %d %s", path, query, w.Code, w.Body)
		}
		if w.Code >= 300 && w.Code < 400 {
			return // the mux's redirect to the cleaned path
		}
		var env struct{ Status, Error string }
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatalf("%s?%s: %d, not JSON: %q", path, query, w.Code, w.Body)
		}
		if w.Code != 200 && (env.Status != "error" || env.Error == "") {
			t.Fatalf("%s?%s: %d without a message: %s", path, query, w.Code, w.Body)
		}
	})
}

func TestLoadTokens(t *testing.T) {
	p := t.TempDir() + "/tokens.yaml"
	if err := os.WriteFile(p, []byte("alice: "+HashToken("a")+"\nbob: "+strings.ToUpper(HashToken("b"))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m, err := LoadTokens(p)
	if err != nil || m[HashToken("a")] != "alice" || m[HashToken("b")] != "bob" || len(m) != 2 {
		t.Fatalf("%v %v", m, err)
	}
	for _, bad := range []string{"alice: abc\n", "al ice: " + HashToken("a") + "\n", "a: " + HashToken("x") + "\nb: " + HashToken("x") + "\n"} {
		if err := os.WriteFile(p, []byte(bad), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTokens(p); err == nil || !strings.Contains(err.Error(), "api.tokens-file") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
