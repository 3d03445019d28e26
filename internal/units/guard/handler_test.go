package guard

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// headerIdentifier believes X-User; root is the admin.
type headerIdentifier struct{}

type statusErr struct{ status int }

func (e statusErr) Error() string   { return "refused" }
func (e statusErr) HTTPStatus() int { return e.status }

func (headerIdentifier) Identify(r *http.Request) (Caller, error) {
	u := r.Header.Get("X-User")
	switch u {
	case "":
		return Caller{}, statusErr{http.StatusUnauthorized}
	case "mallory":
		return Caller{}, statusErr{http.StatusForbidden}
	}
	return Caller{User: u, Admin: u == "root"}, nil
}

// fakeScopes answers owned()'s projects and VMs, counting lookups.
type fakeScopes struct {
	mu    sync.Mutex
	calls int
	fail  bool
}

func (f *fakeScopes) lookup(user string, s Source) ([]string, error) {
	f.mu.Lock()
	f.calls++
	fail := f.fail
	f.mu.Unlock()
	if fail {
		return nil, errors.New("store down at postgres://secret@db")
	}
	return owned(user)(s)
}

func (f *fakeScopes) Projects(_ context.Context, user string) ([]string, error) {
	return f.lookup(user, SourceProjects)
}

func (f *fakeScopes) VMs(_ context.Context, user string) ([]string, error) {
	return f.lookup(user, SourceVMs)
}

// recorder is an upstream that keeps what it was sent and answers an
// empty success.
type recorder struct {
	mu   sync.Mutex
	reqs []recorded
}

type recorded struct {
	method, path, contentType string
	form                      url.Values
	header                    http.Header
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	form, _ := url.ParseQuery(r.URL.RawQuery)
	body, _ := url.ParseQuery(string(b))
	for k, v := range body {
		form[k] = append(form[k], v...)
	}
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, recorded{r.Method, r.URL.Path, r.Header.Get("Content-Type"), form, r.Header.Clone()})
	rec.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
}

func (rec *recorder) last(t *testing.T) recorded {
	t.Helper()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.reqs) == 0 {
		t.Fatal("nothing reached the upstream")
	}
	return rec.reqs[len(rec.reqs)-1]
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

type fixture struct {
	g      *Guard
	rec    *recorder
	up     *httptest.Server
	scopes *fakeScopes
	reg    *prometheus.Registry
}

func newFixture(t testing.TB, clusterLabel string) *fixture {
	t.Helper()
	f := &fixture{rec: &recorder{}, scopes: &fakeScopes{}, reg: prometheus.NewRegistry()}
	f.up = httptest.NewServer(f.rec)
	t.Cleanup(f.up.Close)
	u, _ := url.Parse(f.up.URL + "/prometheus/")
	g, err := New(Config{Upstream: u, Policy: testPolicy(t, clusterLabel), Identifier: headerIdentifier{},
		Scopes: f.scopes, Registerer: f.reg, MaxQueryLength: 4096})
	if err != nil {
		t.Fatal(err)
	}
	f.g = g
	return f
}

// do sends one request to the guard and decodes the envelope.
func (f *fixture) do(method, target, user, body string) (int, map[string]any) {
	var r *http.Request
	if body != "" || method == http.MethodPost {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	} else {
		r = httptest.NewRequest(method, target, nil)
	}
	if user != "" {
		r.Header.Set("X-User", user)
	}
	w := httptest.NewRecorder()
	f.g.ServeHTTP(w, r)
	var env map[string]any
	_ = json.Unmarshal(w.Body.Bytes(), &env)
	return w.Code, env
}

func TestHandlerScopesEveryForwardedSelector(t *testing.T) {
	f := newFixture(t, "")
	p := testPolicy(t, "")
	for _, q := range []string{
		`wattrace_job_energy_joules_total{user=~".*"} or wattrace_job_cpu_seconds_total`,
		`sum by (user) (rate(wattrace_job_energy_joules_total[5m] @ end() offset 5m))`,
		`max_over_time(wattrace_pod_energy_joules_total{namespace=~".+"}[1h:5m]) and on() wattrace_vm_energy_joules_total`,
		`label_join(wattrace_job_a, "user", "", "uid") unless wattrace_node_energy_joules_total`,
		`absent(wattrace_job_a{user="bob"})`,
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			var code int
			var env map[string]any
			if method == http.MethodGet {
				code, env = f.do(method, "/api/v1/query?"+url.Values{"query": {q}, "time": {"1700000000"}}.Encode(), "alice", "")
			} else {
				code, env = f.do(method, "/api/v1/query_range", "alice", url.Values{"query": {q}, "start": {"2023-11-14T22:13:20Z"}, "end": {"1700003600.5"}, "step": {"15"}}.Encode())
			}
			if code != http.StatusOK {
				t.Fatalf("%s %s: %d %v", method, q, code, env)
			}
			got := f.rec.last(t)
			if got.method != http.MethodPost || got.contentType != "application/x-www-form-urlencoded" {
				t.Errorf("forwarded as %s %s", got.method, got.contentType)
			}
			if len(got.form["query"]) != 1 {
				t.Fatalf("forwarded %v", got.form)
			}
			expr, err := testParser.ParseExpr(got.form["query"][0])
			if err != nil {
				t.Fatalf("forwarded %q: %v", got.form["query"][0], err)
			}
			if err := p.Check(expr, owned("alice")); err != nil {
				t.Errorf("%s: forwarded %q: %v", q, got.form["query"][0], err)
			}
			if method == http.MethodPost {
				if got.path != "/prometheus/api/v1/query_range" || got.form.Get("start") != "1700000000.000" || got.form.Get("end") != "1700003600.500" || got.form.Get("step") != "15s" {
					t.Errorf("forwarded %s %v", got.path, got.form)
				}
			}
		}
	}
}

func TestHandlerRefusesAndNeverForwards(t *testing.T) {
	f := newFixture(t, "")
	long := "wattrace_job_a" + strings.Repeat(" + wattrace_job_a", 300)
	for _, c := range []struct {
		name, method, target, user, body string
		status                           int
		typ                              string
	}{
		{"no user", "GET", "/api/v1/query?query=wattrace_job_a", "", "", 401, "unauthorized"},
		{"identifier's status", "GET", "/api/v1/query?query=wattrace_job_a", "mallory", "", 403, "forbidden"},
		{"all series", "GET", "/api/v1/query?query=" + url.QueryEscape(`{__name__=~".+"}`), "alice", "", 403, "forbidden"},
		{"unowned family in or", "POST", "/api/v1/query", "alice", "query=" + url.QueryEscape(`wattrace_job_a or up`), 403, "forbidden"},
		{"info", "GET", "/api/v1/query?query=" + url.QueryEscape(`info(wattrace_node_a)`), "alice", "", 403, "forbidden"},
		{"parse error", "GET", "/api/v1/query?query=" + url.QueryEscape(`sum(`), "alice", "", 400, "bad_data"},
		{"query twice in URL", "GET", "/api/v1/query?query=wattrace_job_a&query=up", "alice", "", 400, "bad_data"},
		{"query in URL and body", "POST", "/api/v1/query?query=wattrace_job_a", "alice", "query=up", 400, "bad_data"},
		{"time twice in body", "POST", "/api/v1/query", "alice", "query=wattrace_job_a&time=1&time=2", 400, "bad_data"},
		{"admin too", "POST", "/api/v1/query?query=up", "root", "query=up", 400, "bad_data"},
		{"too long", "POST", "/api/v1/query", "alice", "query=" + url.QueryEscape(long), 400, "bad_data"},
		{"no query", "GET", "/api/v1/query", "alice", "", 400, "bad_data"},
		{"bad time", "GET", "/api/v1/query?query=wattrace_job_a&time=NaN", "alice", "", 400, "bad_data"},
		{"bad step", "GET", "/api/v1/query_range?query=wattrace_job_a&step=-1", "alice", "", 400, "bad_data"},
		{"semicolon", "GET", "/api/v1/query?query=up;query=wattrace_job_a", "alice", "", 400, "bad_data"},
		{"series needs match", "GET", "/api/v1/series", "alice", "", 400, "bad_data"},
		{"bad label name", "GET", "/api/v1/label/a-b/values", "alice", "", 400, "bad_data"},
		{"unowned match", "GET", "/api/v1/series?match[]=wattrace_job_a&match[]=up", "alice", "", 403, "forbidden"},
		{"json body", "POST", "/api/v1/query", "alice", "", 415, "bad_data"},
		{"admin path", "POST", "/api/v1/admin/tsdb/delete_series?match[]=up", "root", "", 404, "not_found"},
		{"federate", "GET", "/federate?match[]=up", "root", "", 404, "not_found"},
		{"write", "POST", "/api/v1/write", "root", "", 404, "not_found"},
		{"method", "DELETE", "/api/v1/query?query=wattrace_job_a", "alice", "", 405, "bad_data"},
	} {
		before := f.rec.count()
		r := httptest.NewRequest(c.method, c.target, strings.NewReader(c.body))
		ct := "application/x-www-form-urlencoded"
		if c.name == "json body" {
			ct = "application/json"
		}
		r.Header.Set("Content-Type", ct)
		if c.user != "" {
			r.Header.Set("X-User", c.user)
		}
		w := httptest.NewRecorder()
		f.g.ServeHTTP(w, r)
		var env map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Errorf("%s: not JSON: %s", c.name, w.Body)
		}
		if w.Code != c.status || env["status"] != "error" || env["errorType"] != c.typ || env["error"] == "" {
			t.Errorf("%s: %d %v, want %d %s", c.name, w.Code, env, c.status, c.typ)
		}
		if f.rec.count() != before {
			t.Errorf("%s: forwarded %v", c.name, f.rec.last(t))
		}
	}
	if v := testutil.ToFloat64(f.g.metrics.requests.WithLabelValues("query", "forbidden")); v != 4 {
		t.Errorf("forbidden queries counted %v, want 4", v)
	}
}

func TestHandlerDropsUnknownParameters(t *testing.T) {
	f := newFixture(t, "")
	// The caller's headers (identity, credentials, cookies, tenant) are
	// not the upstream's business: the request is built afresh.
	r := httptest.NewRequest("GET", "/api/v1/query?query=wattrace_job_a", nil)
	for k, v := range map[string]string{"X-User": "alice", "Authorization": "Bearer secret", "Cookie": "grafana_session=s",
		"X-Scope-OrgID": "other-tenant", "X-Forwarded-For": "10.0.0.1"} {
		r.Header.Set(k, v)
	}
	f.g.ServeHTTP(httptest.NewRecorder(), r)
	for _, k := range []string{"X-User", "Authorization", "Cookie", "X-Scope-Orgid", "X-Forwarded-For"} {
		if v := f.rec.last(t).header.Get(k); v != "" {
			t.Errorf("forwarded %s: %s", k, v)
		}
	}
	body := url.Values{"query": {"wattrace_job_a"}, "extra_label": {"user=bob"}, "extra_filters[]": {`{user="bob"}`},
		"nocache": {"1"}, "dedup": {"false"}, "partial_response": {"true"}, "stats": {"all"}, "timeout": {"30"}}.Encode()
	if code, env := f.do("POST", "/api/v1/query?nocache=1&dedup=0", "alice", body); code != 200 {
		t.Fatalf("%d %v", code, env)
	}
	got := f.rec.last(t).form
	for k := range got {
		if k != "query" && k != "timeout" {
			t.Errorf("forwarded %s=%v", k, got[k])
		}
	}
	if got.Get("timeout") != "30s" || got.Get("query") != `wattrace_job_a{user="alice"}` {
		t.Errorf("forwarded %v", got)
	}
}

func TestHandlerMatchers(t *testing.T) {
	f := newFixture(t, "cluster")
	p := testPolicy(t, "cluster")
	code, env := f.do("GET", "/api/v1/series?"+url.Values{"match[]": {`wattrace_job_a{user=~"alice|bob"}`, `{__name__="wattrace_pod_b"}`, "wattrace_node_c"}, "start": {"1"}, "limit": {"10"}}.Encode(), "alice", "")
	if code != 200 {
		t.Fatalf("%d %v", code, env)
	}
	got := f.rec.last(t)
	if len(got.form["match[]"]) != 3 || got.form.Get("limit") != "10" || got.form.Get("start") != "1.000" {
		t.Fatalf("forwarded %v", got.form)
	}
	for _, m := range got.form["match[]"] {
		ms, err := testParser.ParseMetricSelector(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.CheckMatchers(ms, owned("alice")); err != nil {
			t.Errorf("forwarded %s: %v", m, err)
		}
	}
	// Label values without match[]: one selector per family alice may
	// read, never the whole TSDB; bob, with no project or VM, gets his
	// jobs and the public families only.
	for user, want := range map[string][]string{
		"alice": {`{__name__=~"^(?:wattrace_job_.*)$",cluster="c1",user="alice"}`, `{__name__=~"^(?:wattrace_pbs_job_.*)$",cluster="c1",user="alice"}`, `{__name__=~"^(?:wattrace_pod_.*)$",cluster="c1",namespace=~"a\\.b|proj_a"}`,
			`{__name__=~"^(?:wattrace_container_.*)$",cluster="c1",namespace=~"a\\.b|proj_a"}`, `{__name__=~"^(?:wattrace_vm_.*)$",cluster="c1",vm_uuid=~"6f1c0c1e-0000-4000-8000-000000000001"}`,
			`{__name__=~"^(?:wattrace_node_.*)$",cluster="c1"}`},
		"bob": {`{__name__=~"^(?:wattrace_job_.*)$",cluster="c1",user="bob"}`, `{__name__=~"^(?:wattrace_pbs_job_.*)$",cluster="c1",user="bob"}`, `{__name__=~"^(?:wattrace_node_.*)$",cluster="c1"}`},
	} {
		f.scopes.mu.Lock()
		f.scopes.calls = 0
		f.scopes.mu.Unlock()
		if code, env := f.do("GET", "/api/v1/label/user/values", user, ""); code != 200 {
			t.Fatalf("%d %v", code, env)
		}
		got := f.rec.last(t)
		if got.method != "GET" || got.path != "/prometheus/api/v1/label/user/values" || strings.Join(got.form["match[]"], " ") != strings.Join(want, " ") {
			t.Errorf("%s: forwarded %s %s %q", user, got.method, got.path, got.form["match[]"])
		}
	}
	// Admins: their selectors as sent, nothing synthesised.
	if code, _ := f.do("POST", "/api/v1/labels", "root", "match[]=up"); code != 200 || strings.Join(f.rec.last(t).form["match[]"], " ") != "up" {
		t.Errorf("admin labels: %d %v", code, f.rec.last(t).form)
	}
	if code, _ := f.do("POST", "/api/v1/labels", "root", ""); code != 200 || len(f.rec.last(t).form["match[]"]) != 0 {
		t.Errorf("admin labels without match[]: %d %v", code, f.rec.last(t).form)
	}
}

func TestHandlerAdminUnchanged(t *testing.T) {
	f := newFixture(t, "cluster")
	q := `{__name__=~".+"} or up`
	if code, env := f.do("GET", "/api/v1/query?query="+url.QueryEscape(q), "root", ""); code != 200 {
		t.Fatalf("%d %v", code, env)
	}
	if got := f.rec.last(t).form.Get("query"); got != q {
		t.Errorf("forwarded %q", got)
	}
}

func TestHandlerUpstreamFailures(t *testing.T) {
	f := newFixture(t, "")
	// A Prometheus 422 (execution error) of a scoped query is passed on.
	fail := http.StatusUnprocessableEntity
	f.up.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(fail)
		_, _ = io.WriteString(w, `{"status":"error","errorType":"execution","error":"secret internals at `+f.up.URL+`"}`)
	})
	if code, env := f.do("GET", "/api/v1/query?query=wattrace_job_a", "alice", ""); code != 422 || env["errorType"] != "execution" {
		t.Errorf("422: %d %v", code, env)
	}
	// A 500 or a redirect is replaced, its body not shown.
	for _, st := range []int{http.StatusInternalServerError, http.StatusFound} {
		fail = st
		code, env := f.do("GET", "/api/v1/query?query=wattrace_job_a", "alice", "")
		if code != http.StatusBadGateway || strings.Contains(env["error"].(string), "127.0.0.1") {
			t.Errorf("%d: %d %v", st, code, env)
		}
	}
	// The store cannot say what alice owns: 503, the DSN not shown.
	f.scopes.mu.Lock()
	f.scopes.fail = true
	f.scopes.mu.Unlock()
	if code, env := f.do("GET", "/api/v1/query?query=wattrace_pod_a", "alice", ""); code != 503 || strings.Contains(env["error"].(string), "secret") {
		t.Errorf("store down: %d %v", code, env)
	}
	// An upstream that is gone: 502, its address not shown.
	f.up.Close()
	code, env := f.do("GET", "/api/v1/query?query=wattrace_job_a", "alice", "")
	if code != http.StatusBadGateway || strings.Contains(env["error"].(string), "127.0.0.1") {
		t.Errorf("down: %d %v", code, env)
	}
	if v := testutil.ToFloat64(f.g.metrics.requests.WithLabelValues("query", "upstream_error")); v != 4 {
		t.Errorf("upstream errors counted %v, want 4", v)
	}
}

func TestScopesCachedPerUser(t *testing.T) {
	f := newFixture(t, "")
	for range 5 {
		if code, env := f.do("GET", "/api/v1/query?query="+url.QueryEscape("wattrace_pod_a + wattrace_container_b + wattrace_vm_c"), "alice", ""); code != 200 {
			t.Fatalf("%d %v", code, env)
		}
	}
	if f.scopes.calls != 2 { // projects and VMs, once each
		t.Errorf("store asked %d times, want 2", f.scopes.calls)
	}
}
