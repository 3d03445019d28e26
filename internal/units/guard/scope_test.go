package guard

import (
	"errors"
	"net/http"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// testPolicy is the default table, node families public, on cluster c1.
func testPolicy(t testing.TB, clusterLabel string) Policy {
	t.Helper()
	var rules []Rule
	for _, s := range DefaultRules() {
		r, err := ParseRule(s)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, r)
	}
	pub, err := ParsePublic([]string{"wattrace_node_.*"})
	if err != nil {
		t.Fatal(err)
	}
	return Policy{Rules: rules, Public: pub, ClusterLabel: clusterLabel, Cluster: "c1"}
}

// owned is what alice owns; bob owns nothing but his jobs.
func owned(user string) Resolve {
	return func(s Source) ([]string, error) {
		switch {
		case s == SourceUser:
			return []string{user}, nil
		case user == "alice" && s == SourceProjects:
			return []string{"a.b", "proj_a"}, nil // sorted, as the cache keeps them
		case user == "alice" && s == SourceVMs:
			return []string{"6f1c0c1e-0000-4000-8000-000000000001"}, nil
		}
		return nil, nil
	}
}

var testParser = parser.NewParser(parser.Options{EnableExperimentalFunctions: true})

func scope(t *testing.T, p Policy, q, user string) (string, error) {
	t.Helper()
	expr, err := testParser.ParseExpr(q)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if err := p.ScopeExpr(expr, owned(user)); err != nil {
		return "", err
	}
	return expr.String(), nil
}

func TestScopeExprAppendsOwnerMatchers(t *testing.T) {
	p := testPolicy(t, "")
	for _, c := range []struct{ in, want string }{
		{`wattrace_job_energy_joules_total`, `wattrace_job_energy_joules_total{user="alice"}`},
		// The user's own matchers stay: a widening regex is intersected.
		{`wattrace_job_energy_joules_total{user=~"alice|bob"}`, `wattrace_job_energy_joules_total{user="alice",user=~"alice|bob"}`},
		{`wattrace_job_energy_joules_total{user="bob"}`, `wattrace_job_energy_joules_total{user="alice",user="bob"}`},
		{`{__name__="wattrace_job_x", user!="alice"}`, `{__name__="wattrace_job_x",user!="alice",user="alice"}`},
		// Every selector: both sides of or/unless/and, ranges, subqueries, @, offset.
		{`wattrace_job_a or wattrace_job_b`, `wattrace_job_a{user="alice"} or wattrace_job_b{user="alice"}`},
		{`wattrace_job_a unless on() wattrace_job_b`, `wattrace_job_a{user="alice"} unless on () wattrace_job_b{user="alice"}`},
		{`rate(wattrace_job_a[5m] offset 1h)`, `rate(wattrace_job_a{user="alice"}[5m] offset 1h)`},
		{`max_over_time(rate(wattrace_job_a[1m])[10m:1m] @ 1700000000)`, `max_over_time(rate(wattrace_job_a{user="alice"}[1m])[10m:1m] @ 1700000000.000)`},
		{`label_replace(wattrace_job_a, "user", "bob", "", "")`, `label_replace(wattrace_job_a{user="alice"}, "user", "bob", "", "")`},
		{`count by (user) (wattrace_job_a)`, `count by (user) (wattrace_job_a{user="alice"})`},
		// Pods by the caller's projects, quoted as literals; VMs by uuid.
		{`wattrace_pod_energy`, `wattrace_pod_energy{namespace=~"a\\.b|proj_a"}`},
		{`wattrace_vm_x`, `wattrace_vm_x{vm_uuid=~"6f1c0c1e-0000-4000-8000-000000000001"}`},
		// Public families pass; no selector at all reads nothing.
		{`wattrace_node_energy_joules_total`, `wattrace_node_energy_joules_total`},
		{`vector(1) + time()`, `vector(1) + time()`},
	} {
		got, err := scope(t, p, c.in, "alice")
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("%s:\n got  %s\n want %s", c.in, got, c.want)
		}
	}
}

func TestScopeExprRefuses(t *testing.T) {
	p := testPolicy(t, "")
	for _, q := range []string{
		`{__name__=~".+"}`,
		`{__name__=~"wattrace_job_.*"}`,
		`{user="alice"}`,
		`wattrace_job_a or go_goroutines`,
		`up`,
		`sum(rate(wattrace_job_a[5m])) + on() group_left unowned_family`,
		`{__name__="wattrace_job_a", __name__="wattrace_pod_b"}`, // two names: refused, not reasoned about
		`info(wattrace_node_energy_joules_total)`,
		`x_wattrace_job_a`, // the family regex is anchored
	} {
		_, err := scope(t, p, q, "alice")
		var e *Error
		if !errors.As(err, &e) || e.Status != http.StatusForbidden {
			t.Errorf("%s: got %v, want a 403", q, err)
		}
	}
	// An empty user name owns nothing, rather than matching user="".
	if _, err := scope(t, p, `wattrace_job_a`, ""); err == nil {
		t.Error("an empty user read job series")
	}
	// bob has no project and no VM: his pod and VM queries are refused.
	for _, q := range []string{`wattrace_pod_a`, `wattrace_vm_a`} {
		if _, err := scope(t, p, q, "bob"); err == nil {
			t.Errorf("%s for bob: not refused", q)
		}
	}
}

func TestScopeClusterLabel(t *testing.T) {
	p := testPolicy(t, "cluster")
	got, err := scope(t, p, `wattrace_job_a + on() wattrace_node_b`, "alice")
	if err != nil {
		t.Fatal(err)
	}
	if want := `wattrace_job_a{cluster="c1",user="alice"} + on () wattrace_node_b{cluster="c1"}`; got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestCheckFindsUnscopedSelectors(t *testing.T) {
	p := testPolicy(t, "")
	for _, q := range []string{`wattrace_job_a`, `wattrace_job_a{user="alice"} or wattrace_job_b`, `wattrace_pod_a{namespace="proj_a"}`} {
		expr, err := testParser.ParseExpr(q)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Check(expr, owned("alice")); err == nil {
			t.Errorf("%s: Check passed an unscoped selector", q)
		}
	}
	expr, _ := testParser.ParseExpr(`wattrace_job_a{user="alice"} or wattrace_node_b`)
	if err := p.Check(expr, owned("alice")); err != nil {
		t.Errorf("Check refused a scoped query: %v", err)
	}
}

func TestParseRule(t *testing.T) {
	r, err := ParseRule("wattrace_gpu_.*=owner:user")
	if err != nil || r.Label != "owner" || r.Source != SourceUser || !r.Family.MatchString("wattrace_gpu_x") || r.Family.MatchString("a_wattrace_gpu_x") {
		t.Fatalf("ParseRule: %+v %v", r, err)
	}
	for _, bad := range []string{"", "x", "x=user", "=user:user", "x=user:nobody", "x=__name__:user", "x=1a:user", "(=user:user"} {
		if _, err := ParseRule(bad); err == nil {
			t.Errorf("ParseRule(%q) passed", bad)
		}
	}
}

func TestScopeMatchersKeepsUserMatchers(t *testing.T) {
	p := testPolicy(t, "")
	ms := []*labels.Matcher{
		labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, "wattrace_job_a"),
		labels.MustNewMatcher(labels.MatchRegexp, "user", ".*"),
	}
	got, err := p.ScopeMatchers(ms, owned("alice"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].Value != ".*" || got[2].String() != `user="alice"` {
		t.Errorf("got %v", got)
	}
	if len(ms) != 2 {
		t.Errorf("the caller's slice changed: %v", ms)
	}
}
