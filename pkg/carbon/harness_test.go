package carbon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/pkg/reading"
)

// clock is the injected clock: tests advance it instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(t time.Time) *clock { return &clock{t: t} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// stepper is a provider whose factor steps at known times: steps[i]
// applies from start + i×every. It dates its samples, like RTE.
type stepper struct {
	now   func() time.Time
	start time.Time
	every time.Duration
	steps []float64
}

func (s *stepper) Name() string { return "rte" }
func (s *stepper) Zone() string { return "FR" }
func (s *stepper) at(t time.Time) (float64, time.Time) {
	i := int(t.Sub(s.start) / s.every)
	return s.steps[i%len(s.steps)], s.start.Add(time.Duration(i) * s.every)
}
func (s *stepper) Fetch(context.Context) (Sample, error) {
	g, at := s.at(s.now())
	return Sample{GramsPerKWh: g, At: at}, nil
}

func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / math.Abs(want)
}

// fakeAPI serves one canned answer at a time and records the requests.
type fakeAPI struct {
	mu     sync.Mutex
	status int
	body   string
	slow   bool
	reqs   []*http.Request
}

func (f *fakeAPI) set(status int, body string) {
	f.mu.Lock()
	f.status, f.body, f.slow = status, body, false
	f.mu.Unlock()
}

func (f *fakeAPI) setSlow() {
	f.mu.Lock()
	f.slow = true
	f.mu.Unlock()
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.reqs = append(f.reqs, r.Clone(context.Background()))
	status, body, slow := f.status, f.body, f.slow
	f.mu.Unlock()
	if slow {
		// Far slower than the provider's timeout: answer only once the
		// client has given up.
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

func (f *fakeAPI) last() *http.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reqs[len(f.reqs)-1]
}

// observed returns a logger whose lines a test can read back.
func observed() (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.DebugLevel)
	return zap.New(core), logs
}

// failureMatrix drives one network provider through every failure the
// issue lists, against api, after a first good answer worth want g/kWh
// dated goodAt. value(raw) builds an answer carrying raw as the factor.
// absurd is a raw value above 2,000 g/kWh once converted.
//
// After each failure the provider must be down, keep want, count the
// failure (and the rejection by reason) and show an age that keeps
// growing with the injected clock.
// failureStep is one failure failureMatrix injects, and the error Poll
// must return for it.
type failureStep struct {
	name   string
	status int
	body   string
	slow   bool
	reason reading.Reason // "" for a plain error
	code   int
}

// check: err, which Poll returned after took, is the step's failure.
func (s failureStep) check(t *testing.T, err error, took time.Duration) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: accepted", s.name)
	}
	if s.slow {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("slow: %v, want a deadline", err)
		}
		if took > 4*time.Second {
			t.Fatalf("slow: Poll waited %v past its timeout", took)
		}
	}
	var rej *reading.Rejection
	if s.reason != "" && (!errors.As(err, &rej) || rej.Reason != s.reason) {
		t.Fatalf("%s: %v, want rejection %s", s.name, err, s.reason)
	}
	var st *StatusError
	if s.code != 0 && (!errors.As(err, &st) || st.Code != s.code) {
		t.Fatalf("%s: %v, want HTTP %d", s.name, err, s.code)
	}
}

func failureMatrix(t *testing.T, p *Provider, api *fakeAPI, clk *clock, want float64, goodAt time.Time, good string, value func(raw string) string, absurd string) {
	t.Helper()
	ctx := context.Background()
	api.set(200, good)
	if err := p.Poll(ctx); err != nil {
		t.Fatalf("good answer: %v", err)
	}
	v, ok := p.Current()
	if !ok || v.GramsPerKWh != want || !v.Up {
		t.Fatalf("after good answer: %+v ok=%v, want %g up", v, ok, want)
	}
	if v.Age != clk.Now().Sub(goodAt) {
		t.Fatalf("age %v, want %v", v.Age, clk.Now().Sub(goodAt))
	}
	steps := []failureStep{
		{name: "500", status: 500, body: `{"error":"internal"}`, code: 500},
		{name: "401", status: 401, body: `{"message":"invalid token"}`, code: 401},
		{name: "garbage", status: 200, body: `<html>maintenance</html>`, reason: reading.Unreadable},
		{name: "truncated", status: 200, body: good[:len(good)/2], reason: reading.Unreadable},
		{name: "negative", status: 200, body: value("-12"), reason: reading.Negative},
		{name: "NaN", status: 200, body: value("NaN"), reason: reading.Unreadable},
		{name: "null", status: 200, body: value("null"), reason: reading.Unreadable},
		{name: "absurd", status: 200, body: value(absurd), reason: reading.OutOfRange},
		{name: "slow", slow: true},
	}
	for i, s := range steps {
		clk.Advance(10 * time.Minute)
		if s.slow {
			api.setSlow()
		} else {
			api.set(s.status, s.body)
		}
		start := time.Now()
		s.check(t, p.Poll(ctx), time.Since(start))
		v, ok := p.Current()
		if !ok || v.GramsPerKWh != want || v.Up {
			t.Fatalf("%s: %+v, want %g kept and down", s.name, v, want)
		}
		if wantAge := clk.Now().Sub(goodAt); v.Age != wantAge {
			t.Fatalf("%s: age %v, want %v", s.name, v.Age, wantAge)
		}
		if h := p.Health(); h.Errors != uint64(i+1) || h.Reads != uint64(i+2) || h.Up {
			t.Fatalf("%s: health %+v", s.name, h)
		}
	}
	// The slow answer, the last, was cut off by the timeout: a late
	// reading, and the reason while it is the latest.
	h := p.Health()
	if h.Reason != reading.ReasonDeadline {
		t.Errorf("after the slow answer: reason %q, want %s", h.Reason, reading.ReasonDeadline)
	}
	wantRej := map[string]uint64{"unreadable": 4, "negative": 1, "out_of_range": 1, "late": 1}
	for k, n := range wantRej {
		if h.Rejected[k] != n {
			t.Errorf("rejected[%s] = %d, want %d (all: %v)", k, h.Rejected[k], n, h.Rejected)
		}
	}
	if h.Source != "carbon/"+p.Name() || h.Age != clk.Now().Sub(goodAt) {
		t.Errorf("health %+v", h)
	}
	// Recovery: a newer good value replaces the old one and comes back up.
	api.set(200, good)
	if err := p.Poll(ctx); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if v, _ := p.Current(); !v.Up {
		t.Fatalf("not up after recovery: %+v", v)
	}
}

func noLogContains(t *testing.T, logs *observer.ObservedLogs, secret string) {
	t.Helper()
	for _, e := range logs.All() {
		line := e.Message
		for k, v := range e.ContextMap() {
			line += " " + k + "=" + strings.TrimSpace(toString(v))
		}
		if strings.Contains(line, secret) {
			t.Fatalf("log line carries the secret: %s", line)
		}
	}
}

func toString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case error:
		return x.Error()
	default:
		return strings.TrimSpace(strings.ReplaceAll(fmtAny(x), "\n", " "))
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
