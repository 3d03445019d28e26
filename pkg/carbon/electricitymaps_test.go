package carbon

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

const emToken = "em-secret-7f3a9c"

// emBody is shaped like the API v3 carbon-intensity/latest answer.
func emBody(zone, date, raw string) string {
	return fmt.Sprintf(`{"zone": %q, "carbonIntensity": %s, "datetime": %q, "updatedAt": "2024-05-14T08:47:14.120Z",
 "createdAt": "2024-05-11T08:50:06.102Z", "emissionFactorType": "lifecycle", "isEstimated": true,
 "estimationMethod": "TIME_SLICER_AVERAGE"}`, zone, raw, date)
}

func TestElectricityMapsFailures(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	goodAt := time.Date(2024, 5, 14, 8, 0, 0, 0, time.UTC)
	clk := newClock(goodAt.Add(50 * time.Minute))
	log, logs := observed()
	p := NewProvider(&ElectricityMaps{URL: srv.URL + "/v3/carbon-intensity/latest", ZoneName: "DE", Token: emToken},
		ProviderOptions{Timeout: time.Second, Now: clk.Now, Log: log})
	failureMatrix(t, p, api, clk, 302, goodAt, emBody("DE", "2024-05-14T08:00:00.000Z", "302"),
		func(raw string) string { return emBody("DE", "2024-05-14T08:00:00.000Z", raw) }, "2450")
	r := api.last()
	if r.URL.Path != "/v3/carbon-intensity/latest" || r.URL.Query().Get("zone") != "DE" || r.Header.Get("auth-token") != emToken {
		t.Fatalf("request %s, auth-token %q", r.URL, r.Header.Get("auth-token"))
	}
	if strings.Contains(r.URL.String(), emToken) {
		t.Fatal("token in the URL")
	}
	noLogContains(t, logs, emToken)
}

// A server that echoes the token (some gateways do, in their 401 page)
// must not get it into an error or a log line.
func TestElectricityMapsTokenNeverLogged(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"status":"error","message":"invalid token %s"}`, r.Header.Get("auth-token"))
	}))
	defer srv.Close()
	log, logs := observed()
	p := NewProvider(&ElectricityMaps{URL: srv.URL, ZoneName: "FR", Token: emToken}, ProviderOptions{Log: log})
	err := p.Poll(context.Background())
	if err == nil || strings.Contains(err.Error(), emToken) || !strings.Contains(err.Error(), "401") {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(err.Error(), "<redacted>") {
		t.Fatalf("the echoed token was not redacted: %v", err)
	}
	if logs.Len() == 0 {
		t.Fatal("the failure was not logged at all")
	}
	noLogContains(t, logs, emToken)
}

// Electricity Maps drives, the country's yearly average is the fallback.
func TestElectricityMapsFallsBackToStatic(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()
	t0 := time.Date(2024, 5, 14, 8, 0, 0, 0, time.UTC)
	clk := newClock(t0.Add(30 * time.Minute))
	em := NewProvider(&ElectricityMaps{URL: srv.URL, ZoneName: "DE", Token: emToken}, ProviderOptions{Now: clk.Now})
	de, err := NewStatic("DE")
	if err != nil {
		t.Fatal(err)
	}
	st := NewProvider(de, ProviderOptions{Now: clk.Now})
	ch := NewChain(2*time.Hour, em, st)
	ctx := context.Background()
	_ = st.Poll(ctx)
	api.set(200, emBody("DE", "2024-05-14T08:00:00.000Z", "302"))
	_ = em.Poll(ctx)
	if f, _ := ch.Factor(); f.Provider != "electricitymaps" || f.GramsPerKWh != 302 {
		t.Fatalf("fresh: %+v", f)
	}
	api.set(500, "")
	clk.Advance(90 * time.Minute) // 2 h old: not yet beyond
	_ = em.Poll(ctx)
	if f, _ := ch.Factor(); f.Provider != "electricitymaps" || f.Age != 2*time.Hour {
		t.Fatalf("2 h old: %+v", f)
	}
	clk.Advance(time.Second)
	f, _ := ch.Factor()
	if f.Provider != "static" || f.Zone != "DE" || f.GramsPerKWh != 365.477 || !f.Fallback || f.Age != 0 {
		t.Fatalf("2 h 1 s old: %+v", f)
	}
}
