package carbon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

const wtPassword = "wt-pass-91bd"

// wtBody is shaped like a v3 /forecast answer with horizon_hours=0.
func wtBody(at, raw, units string) string {
	return fmt.Sprintf(`{"data": [{"point_time": %q, "value": %s, "version": "3.2-2024-04-01"}],
 "meta": {"region": "CAISO_NORTH", "signal_type": "co2_moer", "model": {"date": "2024-04-01"},
 "units": %q, "generated_at_period_seconds": 300, "generated_at": %q}}`, at, raw, units, at)
}

// wtLoginServer hands out tok-1, tok-2, ... to the right basic-auth
// credentials and counts the logins; /v3/forecast goes to data, after the
// bearer token is checked against the latest one issued.
type wtLoginServer struct {
	mu     sync.Mutex
	logins int
	data   http.Handler
}

func (s *wtLoginServer) token() string { return fmt.Sprintf("tok-%d", s.logins) }

func (s *wtLoginServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.URL.Path {
	case "/login":
		u, p, ok := r.BasicAuth()
		if !ok || u != "alice" || p != wtPassword {
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprintf(w, `{"error":"bad credentials for %s:%s"}`, u, p)
			return
		}
		s.logins++
		fmt.Fprintf(w, `{"token": %q}`, s.token())
	case "/v3/forecast":
		if r.Header.Get("Authorization") != "Bearer "+s.token() {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		s.mu.Unlock()
		s.data.ServeHTTP(w, r)
		s.mu.Lock()
	default:
		http.NotFound(w, r)
	}
}

func TestWattTimeFailures(t *testing.T) {
	api := &fakeAPI{}
	ls := &wtLoginServer{data: api}
	srv := httptest.NewServer(ls)
	defer srv.Close()
	goodAt := time.Date(2024, 5, 14, 8, 45, 0, 0, time.UTC)
	clk := newClock(goodAt.Add(3 * time.Minute))
	log, logs := observed()
	w := &WattTime{URL: srv.URL, Region: "CAISO_NORTH", Username: "alice", Password: wtPassword, Now: clk.Now}
	p := NewProvider(w, ProviderOptions{Timeout: time.Second, Now: clk.Now, Log: log})
	at := "2024-05-14T08:45:00+00:00"
	// 800 lb/MWh = 362.8736 g/kWh; 4,500 lb/MWh = 2,041 g/kWh is absurd.
	failureMatrix(t, p, api, clk, 800*0.453592, goodAt, wtBody(at, "800", "lbs_co2_per_mwh"),
		func(raw string) string { return wtBody(at, raw, "lbs_co2_per_mwh") }, "4500")
	if v, _ := p.Current(); v.GramsPerKWh < 362.8735 || v.GramsPerKWh > 362.8737 {
		t.Fatalf("conversion: %g g/kWh", v.GramsPerKWh)
	}
	q := api.last().URL.Query()
	if q.Get("region") != "CAISO_NORTH" || q.Get("signal_type") != "co2_moer" || q.Get("horizon_hours") != "0" {
		t.Fatalf("query %v", q)
	}
	noLogContains(t, logs, wtPassword)
	noLogContains(t, logs, "tok-")
}

// One login serves fetches for 25 minutes; a 401 on data logs in again
// once and retries.
func TestWattTimeTokenLife(t *testing.T) {
	api := &fakeAPI{}
	ls := &wtLoginServer{data: api}
	srv := httptest.NewServer(ls)
	defer srv.Close()
	clk := newClock(time.Date(2024, 5, 14, 9, 0, 0, 0, time.UTC))
	w := &WattTime{URL: srv.URL, Region: "CAISO_NORTH", Username: "alice", Password: wtPassword, Now: clk.Now}
	api.set(200, wtBody("2024-05-14T09:00:00+00:00", "700", "lbs_co2_per_mwh"))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := w.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		clk.Advance(5 * time.Minute)
	}
	if ls.logins != 1 {
		t.Fatalf("%d logins for 3 fetches in 15 min", ls.logins)
	}
	clk.Advance(11 * time.Minute) // 26 min after the login
	if _, err := w.Fetch(ctx); err != nil || ls.logins != 2 {
		t.Fatalf("after 26 min: %v, %d logins", err, ls.logins)
	}
	// The server revokes the token: the next fetch logs in again.
	ls.mu.Lock()
	ls.logins++ // now expects tok-3
	ls.mu.Unlock()
	if s, err := w.Fetch(ctx); err != nil || s.GramsPerKWh != 700*0.453592 {
		t.Fatalf("after revocation: %+v %v", s, err)
	}
	if ls.logins != 4 {
		t.Fatalf("%d logins after revocation, want 4", ls.logins)
	}
}

func TestWattTimeBadPassword(t *testing.T) {
	ls := &wtLoginServer{data: &fakeAPI{}}
	srv := httptest.NewServer(ls)
	defer srv.Close()
	const wrong = "guessed-wrong-42"
	log, logs := observed()
	p := NewProvider(&WattTime{URL: srv.URL, Region: "CAISO_NORTH", Username: "alice", Password: wrong}, ProviderOptions{Log: log})
	err := p.Poll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "403") || strings.Contains(err.Error(), wrong) {
		t.Fatalf("error %v", err)
	}
	noLogContains(t, logs, wrong)
	if _, ok := p.Current(); ok {
		t.Fatal("value without login")
	}
}

// signal-index style answers (a percentile) are not an intensity.
func TestWattTimeRejectsOtherUnits(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(&wtLoginServer{data: api})
	defer srv.Close()
	api.set(200, wtBody("2024-05-14T09:00:00+00:00", "64", "percentile"))
	p := NewProvider(&WattTime{URL: srv.URL, Region: "CAISO_NORTH", Username: "alice", Password: wtPassword}, ProviderOptions{})
	if err := p.Poll(context.Background()); err == nil {
		t.Fatal("percentile taken for g/kWh")
	}
	if h := p.Health(); h.Rejected["unreadable"] != 1 {
		t.Fatalf("health %+v", h)
	}
}
