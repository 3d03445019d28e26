package guard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// roundTripper is an in-process upstream for the fuzz target: what the
// guard would forward, without a socket per execution.
type roundTripper struct {
	mu   sync.Mutex
	sent []url.Values
}

func (rt *roundTripper) RoundTrip(r *http.Request) (*http.Response, error) {
	var form url.Values
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		form, _ = url.ParseQuery(string(b))
	} else {
		form, _ = url.ParseQuery(r.URL.RawQuery)
	}
	rt.mu.Lock()
	rt.sent = append(rt.sent, form)
	rt.mu.Unlock()
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(`{"status":"success","data":[]}`)), Request: r}, nil
}

// FuzzScope sends arbitrary queries as alice, a non-admin: the guard never
// panics or answers 5xx, and whatever it forwards re-parses into selectors
// that each carry alice's owner matchers (or name a public family).
func FuzzScope(f *testing.F) {
	for _, s := range []string{
		`wattrace_job_energy_joules_total`,
		`wattrace_job_a{user=~"alice|bob"} or wattrace_job_b`,
		`{__name__=~".+"}`,
		`sum by (user) (rate(wattrace_pod_a{namespace!="x"}[5m] @ end() offset -1h))`,
		`max_over_time(wattrace_vm_a[1h:1m]) and on() wattrace_node_b`,
		`label_replace(wattrace_job_a, "user", "bob", "user", ".*")`,
		`absent(wattrace_job_a{user="bob"}) unless count(wattrace_job_a)`,
		`{"wattrace_job_a", "user"="x\u00e9\x01"}`,
		`info(wattrace_node_a, {__name__="target_info"})`,
		`wattrace_job_a[5m:] offset 1h @ 100`,
		`histogram_quantile(0.9, sum by (le) (rate(wattrace_job_b_bucket[5m])))`,
		`-wattrace_node_a ^ 2 > bool 1`,
		`{"wattrace_job_a.b", "user.name"="x"} # a comment`,
		`wattrace_job_a{user=~"(?i)ALICE|.*"} offset -5m @ start()`,
		`wattrace_job_a{user="\x00\u00ff\U0001F600"}`,
		"wattrace_job_a{user=`raw\\`}",
		`sum without (user) (wattrace_pod_a) or on(namespace) group_right count_values("user", wattrace_vm_a)`,
		`limitk(1, wattrace_job_a) and sort_by_label(wattrace_job_b, "user")`,
	} {
		f.Add(s, false)
		f.Add(s, true)
	}
	rt := &roundTripper{}
	u, _ := url.Parse("http://tsdb.invalid:9090")
	pol := testPolicy(f, "cluster")
	g, err := New(Config{Upstream: u, Transport: rt, Policy: pol, Identifier: headerIdentifier{}, Scopes: &fakeScopes{}})
	if err != nil {
		f.Fatal(err)
	}
	p := parser.NewParser(parser.Options{EnableExperimentalFunctions: true})
	f.Fuzz(func(t *testing.T, q string, asMatch bool) {
		rt.mu.Lock()
		rt.sent = nil
		rt.mu.Unlock()
		target, key := "/api/v1/query", "query"
		if asMatch {
			target, key = "/api/v1/series", "match[]"
		}
		r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(url.Values{key: {q}}.Encode()))
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.Header.Set("X-User", "alice")
		w := httptest.NewRecorder()
		g.ServeHTTP(w, r)
		if w.Code >= 500 {
			t.Fatalf("%q: %d %s", q, w.Code, w.Body)
		}
		var env map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &env); err != nil {
			t.Fatalf("%q: not JSON: %s", q, w.Body)
		}
		rt.mu.Lock()
		sent := rt.sent
		rt.mu.Unlock()
		if w.Code != 200 {
			if len(sent) != 0 {
				t.Fatalf("%q: refused with %d but forwarded %v", q, w.Code, sent)
			}
			return
		}
		if len(sent) != 1 {
			t.Fatalf("%q: answered 200 after %d upstream requests", q, len(sent))
		}
		if !asMatch {
			expr, err := p.ParseExpr(sent[0].Get("query"))
			if err != nil {
				t.Fatalf("%q: forwarded %q does not parse: %v", q, sent[0].Get("query"), err)
			}
			if err := pol.Check(expr, owned("alice")); err != nil {
				t.Fatalf("%q: forwarded %q: %v", q, sent[0].Get("query"), err)
			}
			return
		}
		for _, m := range sent[0]["match[]"] {
			ms, err := p.ParseMetricSelector(m)
			if err != nil {
				t.Fatalf("%q: forwarded %q does not parse: %v", q, m, err)
			}
			if err := pol.CheckMatchers(ms, owned("alice")); err != nil {
				t.Fatalf("%q: forwarded %q: %v", q, m, err)
			}
		}
	})
}
