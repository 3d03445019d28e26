//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/wattrace/wattrace/internal/units/access"
)

// guardAt finds a moment at which Prometheus holds a sample of every job's
// energy series: an instant query sees only series sampled in the 5 min
// before its time and not marked stale since, and an ended job's series
// go stale 15 s after its end, so the guard is asked about that moment
// rather than about now.
func guardAt(t *testing.T, prom string, jobs map[string]*e2eJob, from, to time.Time) time.Time {
	t.Helper()
	var last []string
	for at := from; !at.After(to); at = at.Add(time.Second) {
		ids := jobIDs(promDirect(t, prom, "wattrace_job_energy_joules_total", at))
		all := true
		for _, j := range jobs {
			all = all && slices.Contains(ids, j.id)
		}
		if all {
			return at
		}
		last = ids
	}
	t.Fatalf("Prometheus never held all four jobs' series at once between %s and %s (last: %v)", from.Format(time.TimeOnly), to.Format(time.TimeOnly), last)
	return time.Time{}
}

// promDirect asks Prometheus itself (no guard): the reference.
func promDirect(t *testing.T, prom, query string, at time.Time) guardAnswer {
	t.Helper()
	q := url.Values{"query": {query}, "time": {strconv.FormatInt(at.Unix(), 10)}}
	resp, err := httpClient.Get(prom + "/api/v1/query?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	ans := parseAnswer(resp.StatusCode, mustRead(io.ReadAll(resp.Body)))
	if ans.status != 200 {
		t.Fatalf("Prometheus %s: %d %s", query, ans.status, ans.raw)
	}
	return ans
}

// jobIDs is the sorted set of job_id label values of an answer.
func jobIDs(a guardAnswer) []string {
	var ids []string
	for _, s := range a.series {
		if id := s.labels["job_id"]; id != "" && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

func idsOf(jobs map[string]*e2eJob, keys ...string) []string {
	var ids []string
	for _, k := range keys {
		ids = append(ids, jobs[k].id)
	}
	sort.Strings(ids)
	return ids
}

// checkGuard: the query guard of A (/tsdb, in front of the test's
// Prometheus), asked with alice's, bob's and carol's bearer tokens about
// the moment all four jobs had series. Alice and bob see exactly their own
// jobs' job_ids and their own user in a sum by (user), whose value is
// Prometheus's own for that user; carol (admin) sees what Prometheus
// holds; a selector of every name and an `or` with an unowned family are
// 403; the user label's values are the caller only.
func checkGuard(t *testing.T, a *apiServer, prom string, tokens map[string]string, jobs map[string]*e2eJob, at time.Time) {
	t.Helper()
	ask := func(who, path string, q url.Values) guardAnswer {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, a.url()+"/tsdb"+path+"?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+tokens[who])
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return parseAnswer(resp.StatusCode, mustRead(io.ReadAll(resp.Body)))
	}
	ts := strconv.FormatInt(at.Unix(), 10)
	query := func(who, q string) guardAnswer {
		return ask(who, "/api/v1/query", url.Values{"query": {q}, "time": {ts}})
	}
	direct := promDirect(t, prom, "wattrace_job_energy_joules_total", at)
	own := map[string][]string{
		"alice": idsOf(jobs, "multistep", "cancelled"),
		"bob":   idsOf(jobs, "short", "running"),
		"carol": jobIDs(direct),
	}
	for _, who := range []string{"alice", "bob", "carol"} {
		ans := query(who, "wattrace_job_energy_joules_total")
		if got := jobIDs(ans); ans.status != 200 || !slices.Equal(got, own[who]) {
			t.Errorf("guard, %s: wattrace_job_energy_joules_total: %d job_ids %v, want %v (%.300s)", who, ans.status, got, own[who], ans.raw)
		} else {
			t.Logf("guard, %s: wattrace_job_energy_joules_total: job_ids %v (%d series)", who, got, len(ans.series))
		}
		for _, s := range ans.series {
			if who != "carol" && s.labels["user"] != who {
				t.Errorf("guard, %s: a series of %q: %v", who, s.labels["user"], s.labels)
			}
		}
	}
	for _, id := range idsOf(jobs, "multistep", "cancelled", "short", "running") {
		if !slices.Contains(own["carol"], id) {
			t.Errorf("Prometheus's answer (carol's reference) lacks job %s: %v", id, own["carol"])
		}
	}

	// sum by (user): the caller's user only, with Prometheus's value.
	const sumQ = "sum by (user) (wattrace_job_cpu_seconds_total)"
	ref := map[string]float64{}
	for _, s := range promDirect(t, prom, sumQ, at).series {
		ref[s.labels["user"]] = slices.Max(append(s.values, 0))
	}
	for _, who := range []string{"alice", "bob", "carol"} {
		ans := query(who, sumQ)
		got := map[string]float64{}
		for _, s := range ans.series {
			got[s.labels["user"]] = slices.Max(append(s.values, 0))
		}
		want := map[string]float64{who: ref[who]}
		if who == "carol" {
			want = ref
		}
		if ans.status != 200 || len(got) != len(want) || ref[who] <= 0 && who != "carol" {
			t.Errorf("guard, %s: %s: %d %v, want %v", who, sumQ, ans.status, got, want)
			continue
		}
		for u, v := range want {
			if g, ok := got[u]; !ok || !within(g, v, 1e-9) {
				t.Errorf("guard, %s: %s: user %q %v, Prometheus says %v", who, sumQ, u, got[u], v)
			}
		}
		t.Logf("guard, %s: %s: %v", who, sumQ, got)
	}

	for _, who := range []string{"alice", "bob"} {
		for _, q := range []string{`{__name__=~".+"}`, "wattrace_job_energy_joules_total or wattrace_process_cpu_seconds_total"} {
			if ans := query(who, q); ans.status != http.StatusForbidden {
				t.Errorf("guard, %s: %s: %d %.300s, want 403", who, q, ans.status, ans.raw)
			} else {
				t.Logf("guard, %s: %s: 403 %s", who, q, strings.TrimSpace(ans.raw))
			}
		}
		ans := ask(who, "/api/v1/label/user/values", url.Values{})
		if ans.status != 200 || !slices.Equal(ans.strs, []string{who}) {
			t.Errorf("guard, %s: label/user/values: %d %v, want [%s] (%.300s)", who, ans.status, ans.strs, who, ans.raw)
		}
	}
}

// checkGuardMunge: on D, a MUNGE credential alice makes (the real munge,
// as her, with wattrace acct's payload) for one /tsdb query is her on the
// guard, which shows her jobs only; the same credential sent again, to the
// API or to the guard, is refused: the API and the guard share one
// access value, so one replay cache.
func checkGuardMunge(t *testing.T, d *apiServer, jobs map[string]*e2eJob, at time.Time) {
	t.Helper()
	path := "/tsdb/api/v1/query?" + url.Values{"query": {"wattrace_job_energy_joules_total"}, "time": {strconv.FormatInt(at.Unix(), 10)}}.Encode()
	aud, err := access.Audience(d.url())
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(access.MungePayload{V: 1, Audience: aud, Method: http.MethodGet, Path: path, Nonce: fmt.Sprint(time.Now().UnixNano())})
	cmd := exec.Command("runuser", "-u", "alice", "--", "munge", "-t", "60")
	cmd.Dir = "/tmp"
	cmd.Stdin = strings.NewReader(string(payload))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("munge as alice: %v", err)
	}
	cred := strings.TrimSpace(string(out))
	send := func(target string) (guardAnswer, string) {
		req, _ := http.NewRequest(http.MethodGet, d.url()+target, nil)
		req.Header.Set("Authorization", "MUNGE "+cred)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b := mustRead(io.ReadAll(resp.Body))
		return parseAnswer(resp.StatusCode, b), strings.TrimSpace(string(b))
	}
	ans, _ := send(path)
	want := idsOf(jobs, "multistep", "cancelled")
	if got := jobIDs(ans); ans.status != 200 || !slices.Equal(got, want) {
		t.Errorf("guard on D, alice's MUNGE credential: %d job_ids %v, want %v (%.300s)", ans.status, got, want, ans.raw)
	} else {
		t.Logf("guard on D, alice's MUNGE credential: job_ids %v", got)
	}
	for _, target := range []string{"/api/v1/units?kind=job", path} {
		if ans, body := send(target); ans.status != http.StatusUnauthorized {
			t.Errorf("alice's guard credential replayed to %s on D: %d %.300s, want 401", target, ans.status, body)
		} else {
			t.Logf("alice's guard credential replayed to %s on D: 401 %s", target, body)
		}
	}
}
