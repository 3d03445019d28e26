package carbon

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"
)

// rteBody is shaped like the Explore API v2.1 records answer for
// eco2mix-national-tr (select=date_heure,taux_co2, limit=1).
func rteBody(date, raw string) string {
	return fmt.Sprintf(`{"total_count": 35040, "results": [{"date_heure": %q, "taux_co2": %s}]}`, date, raw)
}

func TestRTEFailures(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	goodAt := time.Date(2024, 5, 14, 8, 45, 0, 0, time.UTC)
	clk := newClock(goodAt.Add(20 * time.Minute))
	log, logs := observed()
	p := NewProvider(&RTE{URL: srv.URL + "/api/explore/v2.1/catalog/datasets/eco2mix-national-tr/records"},
		ProviderOptions{Timeout: time.Second, Now: clk.Now, Log: log})
	failureMatrix(t, p, api, clk, 21, goodAt, rteBody("2024-05-14T10:45:00+02:00", "21"),
		func(raw string) string { return rteBody("2024-05-14T10:45:00+02:00", raw) }, "2001")

	r := api.last()
	q := r.URL.Query()
	if r.URL.Path != "/api/explore/v2.1/catalog/datasets/eco2mix-national-tr/records" ||
		q.Get("where") != "taux_co2 is not null" || q.Get("order_by") != "date_heure desc" ||
		q.Get("limit") != "1" || q.Get("select") != "date_heure,taux_co2" {
		t.Fatalf("query %s", r.URL)
	}
	// One warning per reason (rate-limited): unreadable, negative,
	// out_of_range, late.
	if n := logs.FilterMessage("rejected reading, not credited").Len(); n != 4 {
		t.Fatalf("%d rejection warnings, want 4", n)
	}
}

func TestRTENoRecord(t *testing.T) {
	api := &fakeAPI{}
	api.set(200, `{"total_count": 0, "results": []}`)
	srv := httptest.NewServer(api)
	defer srv.Close()
	p := NewProvider(&RTE{URL: srv.URL}, ProviderOptions{})
	if err := p.Poll(context.Background()); err == nil {
		t.Fatal("empty result accepted")
	}
	if _, ok := p.Current(); ok {
		t.Fatal("a value from nothing")
	}
	if h := p.Health(); h.Rejected["unreadable"] != 1 || h.Up {
		t.Fatalf("health %+v", h)
	}
}

// RTE drives with the constant as fallback: once RTE's value is older than
// the staleness the integration takes the constant, and comes back to RTE
// when it has a fresh value again. No sleeping: the clock is injected.
func TestRTEFallbackAfterStaleness(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	t0 := time.Date(2024, 5, 14, 8, 45, 0, 0, time.UTC)
	clk := newClock(t0.Add(15 * time.Minute))
	rte := NewProvider(&RTE{URL: srv.URL}, ProviderOptions{Timeout: time.Second, Now: clk.Now})
	cst := NewProvider(Constant{GramsPerKWh: 436}, ProviderOptions{Now: clk.Now})
	ch := NewChain(time.Hour, rte, cst)
	ctx := context.Background()
	if _, ok := ch.Factor(); ok {
		t.Fatal("factor before any read")
	}
	_ = cst.Poll(ctx)
	if f, _ := ch.Factor(); f.Provider != "constant" || !f.Fallback || f.GramsPerKWh != 436 {
		t.Fatalf("RTE not read yet: %+v", f)
	}
	api.set(200, rteBody("2024-05-14T08:45:00+00:00", "32"))
	_ = rte.Poll(ctx)
	if f, _ := ch.Factor(); f.Provider != "rte" || f.Fallback || f.GramsPerKWh != 32 || f.Age != 15*time.Minute {
		t.Fatalf("fresh RTE: %+v", f)
	}
	api.set(503, "down")
	for i := 0; i < 4; i++ { // 4 × 10 min: 55 min old, still within the hour
		clk.Advance(10 * time.Minute)
		_ = rte.Poll(ctx)
	}
	if f, _ := ch.Factor(); f.Provider != "rte" || f.GramsPerKWh != 32 || f.Age != 55*time.Minute {
		t.Fatalf("55 min old RTE: %+v", f)
	}
	clk.Advance(6 * time.Minute)
	_ = rte.Poll(ctx)
	f, _ := ch.Factor()
	if f.Provider != "constant" || !f.Fallback || f.GramsPerKWh != 436 {
		t.Fatalf("61 min old RTE: %+v", f)
	}
	in := ch.Intensities()
	if len(in) != 2 || in[0].Provider != "rte" || in[0].Up || in[0].Age != 61*time.Minute || in[0].GramsPerKWh != 32 {
		t.Fatalf("intensities %+v", in)
	}
	api.set(200, rteBody("2024-05-14T09:45:00+00:00", "41"))
	_ = rte.Poll(ctx)
	if f, _ := ch.Factor(); f.Provider != "rte" || f.Fallback || f.GramsPerKWh != 41 || f.Age != time.Minute {
		t.Fatalf("RTE back: %+v", f)
	}
}
