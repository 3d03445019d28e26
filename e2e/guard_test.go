//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// guardFixture is what the test's /metrics serves. Alice's values are
// small (all under 20), bob's large (700 and up), so a sample of bob's
// that leaks into alice's answer shows in its value, whatever a query did
// to its labels.
const guardFixture = `# TYPE wattrace_job_energy_joules_total counter
wattrace_job_energy_joules_total{job_id="1",user="alice",uid="1001",zone="package"} 3
wattrace_job_energy_joules_total{job_id="2",user="bob",uid="1002",zone="package"} 7000
# TYPE wattrace_job_cpu_seconds_total counter
wattrace_job_cpu_seconds_total{job_id="1",user="alice",uid="1001"} 5
wattrace_job_cpu_seconds_total{job_id="2",user="bob",uid="1002"} 700
# TYPE wattrace_pod_energy_joules_total counter
wattrace_pod_energy_joules_total{namespace="proj_a",pod="pa",pod_uid="ua"} 11
wattrace_pod_energy_joules_total{namespace="proj_b",pod="pb",pod_uid="ub"} 70000
# TYPE wattrace_vm_energy_joules_total counter
wattrace_vm_energy_joules_total{vm_uuid="vm-a",vm="a"} 13
wattrace_vm_energy_joules_total{vm_uuid="vm-b",vm="b"} 700000
# TYPE wattrace_node_energy_joules_total counter
wattrace_node_energy_joules_total{zone="package"} 1
# TYPE wattrace_secret_total counter
wattrace_secret_total{user="alice"} 1
`

// bobLabels are label values only bob's series carry.
var bobLabels = map[string]string{"user": "bob", "uid": "1002", "job_id": "2", "namespace": "proj_b", "pod": "pb", "pod_uid": "ub", "vm_uuid": "vm-b", "vm": "b"}

// promSeries is one series of a query answer, whatever its result type.
type promSeries struct {
	labels map[string]string
	values []float64
}

// guardAnswer is one answer of the guard: status, errorType and series.
type guardAnswer struct {
	status    int
	errorType string
	series    []promSeries
	strs      []string // series, labels and label values answers
	raw       string
}

func (a guardAnswer) sum() float64 {
	var s float64
	for _, se := range a.series {
		for _, v := range se.values {
			s += v
		}
	}
	return s
}

func parseAnswer(status int, b []byte) guardAnswer {
	a := guardAnswer{status: status, raw: string(b)}
	var env struct {
		Status    string          `json:"status"`
		ErrorType string          `json:"errorType"`
		Data      json.RawMessage `json:"data"`
	}
	if json.Unmarshal(b, &env) != nil {
		return a
	}
	a.errorType = env.ErrorType
	var q struct {
		ResultType string          `json:"resultType"`
		Result     json.RawMessage `json:"result"`
	}
	if json.Unmarshal(env.Data, &q) == nil && q.ResultType != "" {
		num := func(p []any) float64 {
			if len(p) != 2 {
				return 0
			}
			s, _ := p[1].(string)
			f, _ := strconv.ParseFloat(s, 64)
			return f
		}
		switch q.ResultType {
		case "vector", "matrix":
			var rs []struct {
				Metric map[string]string `json:"metric"`
				Value  []any             `json:"value"`
				Values [][]any           `json:"values"`
			}
			_ = json.Unmarshal(q.Result, &rs)
			for _, r := range rs {
				s := promSeries{labels: r.Metric}
				if r.Value != nil {
					s.values = append(s.values, num(r.Value))
				}
				for _, p := range r.Values {
					s.values = append(s.values, num(p))
				}
				a.series = append(a.series, s)
			}
		case "scalar":
			var p []any
			_ = json.Unmarshal(q.Result, &p)
			a.series = append(a.series, promSeries{values: []float64{num(p)}})
		}
		return a
	}
	// series: a list of label sets; labels, label values: strings.
	var sets []map[string]string
	if json.Unmarshal(env.Data, &sets) == nil {
		for _, s := range sets {
			a.series = append(a.series, promSeries{labels: s})
		}
		return a
	}
	_ = json.Unmarshal(env.Data, &a.strs)
	return a
}

// TestGuardAgainstPrometheus runs the query guard in a real wattrace-api
// in front of a real Prometheus (Debian's) that scrapes a fixture of two
// users' job, pod and VM series, a public node family and an unowned
// family, and sends it adversarial queries as alice, bob and an admin:
// each answer holds only the caller's series (checked by label and, since
// label_replace can rewrite labels, by value) or is refused.
func TestGuardAgainstPrometheus(t *testing.T) {
	promBin := testenv.Tool(t, "prometheus", "prometheus")
	fixture := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = io.WriteString(w, guardFixture)
	}))
	defer fixture.Close()
	dir := t.TempDir()
	prom := startPrometheus(t, promBin, dir, "guard", fmt.Sprintf(`
global: {scrape_interval: 1s}
scrape_configs:
  - job_name: fixture
    static_configs: [{targets: ["%s"]}]
`, strings.TrimPrefix(fixture.URL, "http://")))

	a := startGuardAPI(t, dir, prom, seedGuardStore(t, dir))
	defer a.stop()
	defer func() {
		if t.Failed() {
			tailFile(t, a.log, 30)
		}
	}()
	waitGuardHistory(t, prom)

	g := &guardClient{t: t, url: a.url(), at: strconv.FormatInt(time.Now().Unix(), 10)}
	for i, c := range guardCases(g.at) {
		g.checkInstant(i, c)
	}
	g.checkParameters()
	g.checkRange()
	g.checkSeriesAndLabels()
	g.checkExemplars()
	checkGuardLatency(t, prom, a.url())
	g.checkOnlyQueryEndpoints()
}

// seedGuardStore writes the units store the guard decides ownership from:
// alice in proj_a with VM vm-a, bob in proj_b with vm-b. It returns its
// path.
func seedGuardStore(t *testing.T, dir string) string {
	t.Helper()
	now := time.Now()
	dbPath := filepath.Join(dir, "units.db")
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{Path: dbPath})
	if err != nil {
		t.Fatal(err)
	}
	seed := []units.Unit{
		{Cluster: "c1", Kind: units.KindJob, ID: "1", User: "alice", Project: "proj_a", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c1", Kind: units.KindJob, ID: "2", User: "bob", Project: "proj_b", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c1", Kind: units.KindVM, ID: "vm-a", User: "alice", Project: "proj_a", Start: now.Add(-time.Hour), Status: units.StatusRunning},
		{Cluster: "c1", Kind: units.KindVM, ID: "vm-b", User: "bob", Project: "proj_b", Start: now.Add(-time.Hour), Status: units.StatusRunning},
	}
	if err := st.UpsertJobs(ctx, "e2e", now, seed); err != nil {
		t.Fatal(err)
	}
	st.Close()
	return dbPath
}

// startGuardAPI starts wattrace-api with the guard in front of prom (root
// an admin, the node families public, queries up to 2,048 bytes); the
// caller stops it.
func startGuardAPI(t *testing.T, dir, prom, dbPath string) *apiServer {
	t.Helper()
	a := &apiServer{name: "guard", port: freePort(t), log: filepath.Join(dir, "api.log"), t: t}
	a.args = []string{fmt.Sprintf("--web.listen-address=127.0.0.1:%d", a.port), "--store.path=" + dbPath,
		"--tsdb.url=" + prom, "--slurm.source=none", "--cluster=c1", "--api.trusted-proxies=127.0.0.1", "--api.admins=root",
		"--guard.upstream=" + prom, "--guard.public=wattrace_node_.*", "--guard.max-query-length=2048"}
	a.start()
	return a
}

// waitGuardHistory waits for 20 s of scrapes, so offset and subqueries
// have history.
func waitGuardHistory(t *testing.T, prom string) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := httpClient.Get(prom + "/api/v1/query?query=" + url.QueryEscape(`count(count_over_time({job="fixture",__name__=~"wattrace_.*"}[1m]) >= 20)`))
		if err == nil {
			ans := parseAnswer(resp.StatusCode, mustRead(io.ReadAll(resp.Body)))
			resp.Body.Close()
			if ans.sum() == 10 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus has not scraped the fixture 20 times")
		}
		time.Sleep(time.Second)
	}
}

// guardClient asks the guard of a running wattrace-api as a user.
type guardClient struct {
	t   *testing.T
	url string // the wattrace-api's base URL
	at  string // the instant queries' evaluation time, Unix seconds
}

func (g *guardClient) ask(method, path, user string, form url.Values, body string) guardAnswer {
	g.t.Helper()
	target := g.url + "/tsdb" + path
	var req *http.Request
	if method == http.MethodGet {
		if len(form) > 0 {
			target += "?" + form.Encode()
		}
		req, _ = http.NewRequest(method, target, nil)
	} else {
		if body == "" {
			body = form.Encode()
		}
		req, _ = http.NewRequest(method, target, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if user != "" {
		req.Header.Set("X-Grafana-User", user)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	return parseAnswer(resp.StatusCode, mustRead(io.ReadAll(resp.Body)))
}

func (g *guardClient) instant(user, q string) guardAnswer {
	return g.ask(http.MethodGet, "/api/v1/query", user, url.Values{"query": {q}, "time": {g.at}}, "")
}

// onlyAlice fails when an answer to alice holds anything of bob's.
func (g *guardClient) onlyAlice(what string, ans guardAnswer, rewritesLabels bool) {
	t := g.t
	t.Helper()
	for _, s := range ans.series {
		for k, v := range bobLabels {
			if s.labels[k] == v && !rewritesLabels {
				t.Errorf("%s: bob's series in alice's answer: %v", what, s.labels)
			}
		}
		for _, v := range s.values {
			if v >= 500 {
				t.Errorf("%s: bob's value %v in alice's answer (%v)", what, v, s.labels)
			}
		}
	}
	for _, s := range ans.strs {
		if slices.Contains([]string{"bob", "1002", "proj_b", "vm-b", "pb", "ub"}, s) {
			t.Errorf("%s: bob's label value %q in alice's answer", what, s)
		}
	}
}

// guardCase is one instant query: who asks, the status wanted and, for a
// 200, the sum of the answer's values.
type guardCase struct {
	user, q string
	status  int
	sum     float64
}

const noSum = -1 // no expected sum: the leak checks only

// guardCases are the adversarial instant queries, evaluated at at.
func guardCases(at string) []guardCase {
	long := "wattrace_job_energy_joules_total" + strings.Repeat(" + wattrace_job_energy_joules_total", 70)
	return []guardCase{
		{"alice", `wattrace_job_energy_joules_total`, 200, 3},
		{"alice", `wattrace_job_energy_joules_total{user="bob"}`, 200, 0},
		{"alice", `wattrace_job_energy_joules_total{user=~"alice|bob"}`, 200, 3},
		{"alice", `wattrace_job_energy_joules_total{user=~".+"}`, 200, 3},
		{"alice", `wattrace_job_energy_joules_total{user!="alice"}`, 200, 0},
		{"alice", `wattrace_job_energy_joules_total{user="alice",user="bob"}`, 200, 0},
		{"alice", `{__name__="wattrace_job_energy_joules_total"}`, 200, 3},
		{"alice", `{__name__="wattrace_job_energy_joules_total",__name__=~"wattrace_secret.*"}`, 200, 0},
		{"alice", `{__name__="wattrace_job_energy_joules_total",__name__="wattrace_secret_total"}`, 403, 0},
		{"alice", `wattrace_job_energy_joules_total or wattrace_secret_total`, 403, 0},
		{"alice", `wattrace_job_energy_joules_total or on() wattrace_job_cpu_seconds_total`, 200, noSum},
		{"alice", `wattrace_job_energy_joules_total unless wattrace_job_cpu_seconds_total`, 200, 3},
		{"alice", `wattrace_job_energy_joules_total and on() wattrace_job_cpu_seconds_total{user="bob"}`, 200, 0},
		{"alice", `{__name__=~".+"}`, 403, 0},
		{"alice", `{__name__=~"wattrace_job_.*"}`, 403, 0},
		{"alice", `{user="bob"}`, 403, 0},
		{"alice", `{__name__!=""}`, 403, 0},
		{"alice", `count by (user) (wattrace_job_energy_joules_total)`, 200, 1},
		{"alice", `count(wattrace_job_cpu_seconds_total)`, 200, 1},
		{"alice", `absent(wattrace_job_energy_joules_total{user="bob"})`, 200, 1},
		{"alice", `absent(wattrace_job_energy_joules_total{user="alice"})`, 200, 0},
		{"alice", `max_over_time(wattrace_job_energy_joules_total[1m:5s])`, 200, 3},
		{"alice", `max_over_time(sum(wattrace_job_energy_joules_total or wattrace_pod_energy_joules_total)[30s:5s] offset 5s)`, 200, 14},
		{"alice", `sum(rate(wattrace_job_energy_joules_total[1m]))`, 200, 0},
		{"alice", `wattrace_job_energy_joules_total offset 10s`, 200, 3},
		{"alice", `wattrace_job_energy_joules_total @ ` + at, 200, 3},
		{"alice", `sum(wattrace_job_energy_joules_total @ end() offset 5s)`, 200, 3},
		{"alice", `label_replace(wattrace_job_energy_joules_total, "user", "bob", "user", ".*")`, 200, 3},
		{"alice", `label_join(wattrace_job_energy_joules_total, "user", ",", "uid", "job_id")`, 200, 3},
		{"alice", `label_replace(wattrace_secret_total, "__name__", "wattrace_job_x", "", "")`, 403, 0},
		{"alice", `wattrace_pod_energy_joules_total`, 200, 11},
		{"alice", `wattrace_pod_energy_joules_total{namespace=~"proj_.*"}`, 200, 11},
		{"alice", `wattrace_pod_energy_joules_total{namespace="proj_b"}`, 200, 0},
		{"alice", `wattrace_vm_energy_joules_total{vm_uuid=~".*"}`, 200, 13},
		{"alice", `wattrace_node_energy_joules_total`, 200, 1},
		{"alice", `wattrace_node_energy_joules_total + on() group_left wattrace_job_energy_joules_total`, 200, 4},
		{"alice", `sum(wattrace_job_energy_joules_total) + sum(wattrace_pod_energy_joules_total) + sum(wattrace_vm_energy_joules_total)`, 200, 27},
		{"alice", `topk(5, wattrace_job_energy_joules_total or wattrace_pod_energy_joules_total or wattrace_vm_energy_joules_total)`, 200, 27},
		{"alice", `wattrace_job_energy_joules_total / on(job_id) group_left wattrace_job_cpu_seconds_total`, 200, noSum},
		{"alice", `scalar(wattrace_job_cpu_seconds_total)`, 200, 5},
		{"alice", `sum(wattrace_job_energy_joules_total[1m])`, 400, 0},
		{"alice", `wattrace_secret_total`, 403, 0},
		{"alice", `up`, 403, 0},
		{"alice", `info(wattrace_node_energy_joules_total)`, 403, 0},
		{"alice", `sum(`, 400, 0},
		{"alice", `vector(1)`, 200, 1},
		{"alice", long, 400, 0},
		{"bob", `wattrace_job_energy_joules_total`, 200, 7000},
		{"bob", `wattrace_pod_energy_joules_total{namespace="proj_a"}`, 200, 0},
		{"bob", `wattrace_vm_energy_joules_total`, 200, 700000},
		{"root", `sum(wattrace_job_energy_joules_total)`, 200, 7003},
		{"root", `sum({__name__=~"wattrace_(pod|vm)_energy_joules_total"})`, 200, 770024},
		{"root", `wattrace_secret_total`, 200, 1},
		{"", `wattrace_node_energy_joules_total`, 401, 0},
	}
}

// checkInstant asks case i and checks its status, a refusal's errorType,
// that an answer to alice holds nothing of bob's, and the sum.
func (g *guardClient) checkInstant(i int, c guardCase) {
	t := g.t
	t.Helper()
	what := fmt.Sprintf("#%d %s %s", i, c.user, c.q)
	ans := g.instant(c.user, c.q)
	if ans.status != c.status {
		t.Errorf("%s: status %d (%s), want %d", what, ans.status, clipRaw(ans.raw), c.status)
		return
	}
	if c.status == 403 && ans.errorType != "forbidden" {
		t.Errorf("%s: errorType %q", what, ans.errorType)
	}
	if c.user == "alice" {
		g.onlyAlice(what, ans, strings.Contains(c.q, "label_"))
	}
	if c.status == 200 && c.sum != noSum && ans.sum() != c.sum {
		t.Errorf("%s: sum %v, want %v (%s)", what, ans.sum(), c.sum, clipRaw(ans.raw))
	}
}

// checkParameters: a parameter given twice (URL and body, or twice in the
// body) is refused; TSDB-specific ones are dropped, not forwarded.
func (g *guardClient) checkParameters() {
	t := g.t
	t.Helper()
	q := url.Values{"query": {"wattrace_job_energy_joules_total"}}
	if ans := g.ask(http.MethodPost, "/api/v1/query?query=wattrace_node_energy_joules_total", "alice", q, ""); ans.status != 400 {
		t.Errorf("query in URL and body: %d", ans.status)
	}
	if ans := g.ask(http.MethodPost, "/api/v1/query", "alice", nil, "query=wattrace_job_energy_joules_total&query=wattrace_secret_total"); ans.status != 400 {
		t.Errorf("query twice in the body: %d", ans.status)
	}
	if ans := g.ask(http.MethodPost, "/api/v1/query", "alice", nil, "query=wattrace_job_energy_joules_total&time="+g.at+"&time=1"); ans.status != 400 {
		t.Errorf("time twice: %d", ans.status)
	}
	ans := g.ask(http.MethodPost, "/api/v1/query?extra_label=user%3Dbob&nocache=1&dedup=false", "alice", nil,
		"query=wattrace_job_energy_joules_total&extra_filters[]=%7Buser%3D%22bob%22%7D&partial_response=true")
	if ans.status != 200 || ans.sum() != 3 {
		t.Errorf("extra_label/nocache/dedup: %d %v", ans.status, ans.sum())
	}
	g.onlyAlice("extra params", ans, false)
}

// checkRange: a range query over the scrapes.
func (g *guardClient) checkRange() {
	g.t.Helper()
	rng := url.Values{"query": {`wattrace_job_energy_joules_total or wattrace_vm_energy_joules_total{vm_uuid=~"vm-.*"}`},
		"start": {strconv.FormatInt(time.Now().Add(-20*time.Second).Unix(), 10)}, "end": {g.at}, "step": {"5"}}
	ans := g.ask(http.MethodPost, "/api/v1/query_range", "alice", rng, "")
	if ans.status != 200 || len(ans.series) != 2 {
		g.t.Errorf("query_range: %d %s", ans.status, clipRaw(ans.raw))
	}
	g.onlyAlice("query_range", ans, false)
}

// checkSeriesAndLabels: series, labels and label values.
func (g *guardClient) checkSeriesAndLabels() {
	t := g.t
	t.Helper()
	ans := g.ask(http.MethodGet, "/api/v1/series", "alice", url.Values{"match[]": {"wattrace_job_energy_joules_total", `wattrace_pod_energy_joules_total{namespace=~".+"}`, "wattrace_vm_energy_joules_total"}}, "")
	if ans.status != 200 || len(ans.series) != 3 {
		t.Errorf("series: %d %s", ans.status, clipRaw(ans.raw))
	}
	g.onlyAlice("series", ans, false)
	if ans = g.ask(http.MethodPost, "/api/v1/series", "alice", url.Values{"match[]": {"wattrace_job_energy_joules_total", `{__name__=~".+"}`}}, ""); ans.status != 403 {
		t.Errorf("series with a nameless match[]: %d", ans.status)
	}
	for label, want := range map[string]string{"user": "alice", "namespace": "proj_a", "vm_uuid": "vm-a", "job_id": "1"} {
		ans = g.ask(http.MethodGet, "/api/v1/label/"+label+"/values", "alice", nil, "")
		if ans.status != 200 || strings.Join(ans.strs, ",") != want {
			t.Errorf("label %s values for alice: %d %v, want %s", label, ans.status, ans.strs, want)
		}
	}
	ans = g.ask(http.MethodGet, "/api/v1/label/user/values", "root", nil, "")
	sort.Strings(ans.strs)
	if ans.status != 200 || strings.Join(ans.strs, ",") != "alice,bob" {
		t.Errorf("label user values for root: %d %v", ans.status, ans.strs)
	}
	ans = g.ask(http.MethodPost, "/api/v1/labels", "alice", nil, "")
	if ans.status != 200 || !slices.Contains(ans.strs, "user") {
		t.Errorf("labels for alice: %d %v", ans.status, ans.strs)
	}
}

// checkExemplars: refused for an unowned family, answered for an owned one.
func (g *guardClient) checkExemplars() {
	t := g.t
	t.Helper()
	if ans := g.ask(http.MethodGet, "/api/v1/query_exemplars", "alice", url.Values{"query": {"wattrace_job_energy_joules_total or wattrace_secret_total"}}, ""); ans.status != 403 {
		t.Errorf("exemplars of an unowned family: %d", ans.status)
	}
	if ans := g.ask(http.MethodGet, "/api/v1/query_exemplars", "alice", url.Values{"query": {"wattrace_job_energy_joules_total"}, "start": {"0"}, "end": {g.at}}, ""); ans.status != 200 {
		t.Errorf("exemplars: %d %s", ans.status, clipRaw(ans.raw))
	}
}

// checkGuardLatency: 50 users refreshing a dashboard, straight to
// Prometheus and through the guard (docs/performance.md, "Query guard"):
// paced, each user a query every 500 ms, and back to back.
func checkGuardLatency(t *testing.T, prom, guardURL string) {
	t.Helper()
	direct, guarded := guardLoad(t, prom, guardURL, 8, 500*time.Millisecond)
	t.Logf("50 users, a query_range each every 500 ms: Prometheus p50 %v p99 %v; through the guard p50 %v p99 %v; the guard adds %v at p50",
		direct[0], direct[1], guarded[0], guarded[1], guarded[0]-direct[0])
	if guarded[0]-direct[0] > 2*time.Millisecond {
		t.Errorf("the guard adds %v at p50, over the 2 ms budget", guarded[0]-direct[0])
	}
	direct, guarded = guardLoad(t, prom, guardURL, 5, 0)
	t.Logf("50 users back to back: Prometheus p50 %v p99 %v; through the guard p50 %v p99 %v",
		direct[0], direct[1], guarded[0], guarded[1])
}

// checkOnlyQueryEndpoints: nothing but the query endpoints.
func (g *guardClient) checkOnlyQueryEndpoints() {
	g.t.Helper()
	for _, p := range []string{"/api/v1/status/config", "/federate", "/api/v1/targets", "/api/v1/admin/tsdb/snapshot", "/api/v1/write"} {
		if ans := g.ask(http.MethodPost, p, "root", nil, ""); ans.status != 404 || ans.errorType != "not_found" {
			g.t.Errorf("%s: %d %s", p, ans.status, clipRaw(ans.raw))
		}
	}
}

// guardLoad sends a dashboard's range query from 50 concurrent users,
// rounds times each, straight to Prometheus and through the guard, in
// turns, and returns the p50 and p99 of each. With a period, each user
// sends one query per period (a refreshing dashboard, the users' starts
// spread over the period); without, back to back (the machine
// saturated, so latency is mostly queueing behind the other 49).
func guardLoad(t *testing.T, prom, guardURL string, rounds int, period time.Duration) (direct, guarded [2]time.Duration) {
	t.Helper()
	const users = 50
	end := time.Now()
	form := url.Values{"query": {`sum by (job_id, zone) (rate(wattrace_job_energy_joules_total[1m])) or sum by (namespace) (rate(wattrace_pod_energy_joules_total[1m]))`},
		"start": {strconv.FormatInt(end.Add(-5*time.Minute).Unix(), 10)}, "end": {strconv.FormatInt(end.Unix(), 10)}, "step": {"5"}}.Encode()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2 * users}}
	run := func(base string, via bool) []time.Duration {
		var mu sync.Mutex
		var lat []time.Duration
		var wg sync.WaitGroup
		for u := range users {
			wg.Add(1)
			go func() {
				defer wg.Done()
				user := []string{"alice", "bob"}[u%2]
				next := time.Now().Add(period * time.Duration(u) / users)
				for range rounds {
					time.Sleep(time.Until(next))
					next = next.Add(period)
					req, _ := http.NewRequest(http.MethodPost, base+"/api/v1/query_range", strings.NewReader(form))
					req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
					if via {
						req.Header.Set("X-Grafana-User", user)
					}
					start := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						t.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					d := time.Since(start)
					if resp.StatusCode != 200 {
						t.Errorf("load via guard=%v: %d", via, resp.StatusCode)
						return
					}
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		slices.Sort(lat)
		return lat
	}
	pct := func(l []time.Duration) [2]time.Duration {
		if len(l) == 0 {
			return [2]time.Duration{}
		}
		return [2]time.Duration{l[len(l)/2], l[len(l)*99/100]}
	}
	var d, g []time.Duration
	for range 3 { // alternate, so neither side gets the quieter moments
		d = append(d, run(prom, false)...)
		g = append(g, run(guardURL+"/tsdb", true)...)
	}
	slices.Sort(d)
	slices.Sort(g)
	return pct(d), pct(g)
}

func mustRead(v []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return v
}

func clipRaw(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}
