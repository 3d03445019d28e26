package guard

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// dashboardQuery is a typical panel query of the jobs dashboard.
const dashboardQuery = `sum by (job_id, zone) (rate(wattrace_job_energy_joules_total{job_id=~"1|2|3",mode="dynamic"}[5m])) / on(job_id) group_left sum by (job_id) (rate(wattrace_job_cpu_seconds_total[5m])) or sum by (namespace) (rate(wattrace_pod_energy_joules_total[5m]))`

// BenchmarkGuardScope is the guard's work on one query, without HTTP:
// parse, scope, print, re-parse and check.
func BenchmarkGuardScope(b *testing.B) {
	f := newFixture(b, "cluster")
	resolve := f.g.resolver(b.Context(), "alice")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.g.scopeQuery(dashboardQuery, Caller{User: "alice"}, resolve); err != nil {
			b.Fatal(err)
		}
	}
}

// cannedUpstream answers every request at once with a small vector, so
// what a request costs is the guard's own work.
type cannedUpstream struct{}

const cannedAnswer = `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"job_id":"1","zone":"package"},"value":[1700000000,"3.5"]}]}}`

func (cannedUpstream) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		_, _ = io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(cannedAnswer)), Request: r}, nil
}

// BenchmarkGuardParallel50 is a dashboard refresh by 50 users at once:
// 50 goroutines (SetParallelism on the machine's cores) send the panel
// query through ServeHTTP to an upstream that answers at once; it reports
// the guard's p50 and p99 per request.
func BenchmarkGuardParallel50(b *testing.B) {
	u, _ := url.Parse("http://tsdb.invalid:9090")
	g, err := New(Config{Upstream: u, Transport: cannedUpstream{}, Policy: testPolicy(b, "cluster"), Identifier: headerIdentifier{}, Scopes: everyoneScopes{}})
	if err != nil {
		b.Fatal(err)
	}
	body := url.Values{"query": {dashboardQuery}, "start": {"1700000000"}, "end": {"1700003600"}, "step": {"60"}}.Encode()
	users := make([]string, 50)
	for i := range users {
		users[i] = "user" + strconv.Itoa(i)
	}
	var mu sync.Mutex
	var lat []time.Duration
	b.SetParallelism(max(1, 50/maxProcs()))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var mine []time.Duration
		i := 0
		for pb.Next() {
			r := httptest.NewRequest(http.MethodPost, "/api/v1/query_range", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			r.Header.Set("X-User", users[i%len(users)])
			i++
			w := httptest.NewRecorder()
			start := time.Now()
			g.ServeHTTP(w, r)
			mine = append(mine, time.Since(start))
			if w.Code != 200 {
				b.Errorf("%d %s", w.Code, w.Body)
				return
			}
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	})
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// everyoneScopes gives each user two projects and a VM.
type everyoneScopes struct{}

func (everyoneScopes) Projects(_ context.Context, user string) ([]string, error) {
	return []string{user + "_a", user + "_b"}, nil
}

func (everyoneScopes) VMs(_ context.Context, user string) ([]string, error) {
	return []string{user + "-vm"}, nil
}

func maxProcs() int { return runtime.GOMAXPROCS(0) }
