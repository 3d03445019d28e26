package redfish

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/redfish/proxy"
	"github.com/wattrace/wattrace/pkg/reading"
)

const (
	user     = "wattrace"
	password = "s3cret-Pa55w0rd"
)

// fakeBMC serves the DMTF public-rackmount1 mockup with session and basic
// authentication, and lets tests vary resources, revoke sessions and slow
// down.
type fakeBMC struct {
	t   *testing.T
	srv *httptest.Server

	mu        sync.Mutex
	tokens    map[string]bool
	nextTok   int
	logins    int
	logouts   int
	sessions  bool // SessionService enabled
	delay     time.Duration
	overrides map[string]func(map[string]any) // edits a resource's JSON
	missing   map[string]bool
	requests  []string
	status    int // when set, authorised GETs answer this HTTP status
}

func newFakeBMC(t *testing.T) *fakeBMC {
	b := &fakeBMC{t: t, tokens: map[string]bool{}, sessions: true, overrides: map[string]func(map[string]any){}, missing: map[string]bool{}}
	b.srv = httptest.NewServer(b)
	t.Cleanup(b.srv.Close)
	return b
}

func (b *fakeBMC) set(path string, f func(map[string]any)) {
	b.mu.Lock()
	b.overrides[path] = f
	b.mu.Unlock()
}

func (b *fakeBMC) revokeAll() {
	b.mu.Lock()
	b.tokens = map[string]bool{}
	b.mu.Unlock()
}

func (b *fakeBMC) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	delay := b.delay
	b.requests = append(b.requests, r.Method+" "+r.URL.Path)
	b.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	if r.URL.Path == SessionsPath && r.Method == http.MethodPost {
		b.login(w, r)
		return
	}
	if !b.authorized(r) {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"Base.1.8.NoValidSession","message":"There is no valid session established with the implementation."}}`)
		return
	}
	if strings.HasPrefix(r.URL.Path, SessionsPath+"/") && r.Method == http.MethodDelete {
		b.mu.Lock()
		b.logouts++
		delete(b.tokens, r.Header.Get("X-Auth-Token"))
		b.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	b.mu.Lock()
	edit, gone, status := b.overrides[r.URL.Path], b.missing[r.URL.Path], b.status
	b.mu.Unlock()
	if status != 0 {
		w.WriteHeader(status)
		fmt.Fprint(w, `{"error":{"code":"Base.1.8.InternalError","message":"The request failed due to an internal service error."}}`)
		return
	}
	body, err := os.ReadFile(filepath.Join("testdata", "public-rackmount1", strings.TrimPrefix(r.URL.Path, "/redfish/v1"), "index.json"))
	if err != nil || gone {
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"error":{"code":"Base.1.8.ResourceMissingAtURI","message":"The resource at the URI was not found."}}`)
		return
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			b.t.Error(err)
		}
		edit(m)
		body, _ = json.Marshal(m)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}

func (b *fakeBMC) login(w http.ResponseWriter, r *http.Request) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.sessions {
		w.WriteHeader(http.StatusMethodNotAllowed)
		return
	}
	var c struct{ UserName, Password string }
	if json.NewDecoder(r.Body).Decode(&c) != nil || c.UserName != user || c.Password != password {
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprint(w, `{"error":{"code":"Base.1.8.GeneralError","@Message.ExtendedInfo":[{"Message":"Invalid username or password."}]}}`)
		return
	}
	b.nextTok++
	b.logins++
	tok := fmt.Sprintf("tok-%d", b.nextTok)
	b.tokens[tok] = true
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", fmt.Sprintf("%s/%d", SessionsPath, b.nextTok))
	w.WriteHeader(http.StatusCreated)
	fmt.Fprint(w, `{"Id":"1","UserName":"wattrace"}`)
}

func (b *fakeBMC) authorized(r *http.Request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if tok := r.Header.Get("X-Auth-Token"); tok != "" {
		return b.tokens[tok]
	}
	u, p, ok := r.BasicAuth()
	return ok && u == user && p == password
}

func (b *fakeBMC) config() Config {
	return Config{URL: b.srv.URL, Username: user, Password: password, Timeout: 2 * time.Second}
}

// sensorClock makes the TotalPower sensor read watts(i) at t0+i seconds on
// the i-th request, as a live BMC would.
func sensorClock(b *fakeBMC, t0 time.Time, watts func(i int) float64) {
	i := 0
	var mu sync.Mutex
	b.set("/redfish/v1/Chassis/1U/Sensors/TotalPower", func(m map[string]any) {
		mu.Lock()
		defer mu.Unlock()
		m["Reading"] = watts(i)
		m["ReadingTime"] = t0.Add(time.Duration(i) * time.Second).Format(time.RFC3339)
		i++
	})
}

func read(t *testing.T, m *Meter) power.Reading {
	t.Helper()
	r, err := m.ReadPower(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 1 {
		t.Fatalf("readings %+v", r)
	}
	return r[0]
}

func TestCurrentSchemaSensor(t *testing.T) {
	b := newFakeBMC(t)
	m, err := NewMeter(b.config())
	if err != nil {
		t.Fatal(err)
	}
	// Unmodified mockup: EnvironmentMetrics.PowerWatts points at the
	// TotalPower sensor: 374 W at 2019-08-13T04:14:33+06:00.
	r := read(t, m)
	if r.Zone != reading.ZonePlatform || r.Socket != -1 || r.Energy || r.Watts != 374 ||
		!r.Time.Equal(time.Date(2019, 8, 12, 22, 14, 33, 0, time.UTC)) {
		t.Fatalf("reading %+v", r)
	}
	if m.Source() != "power sensor /redfish/v1/Chassis/1U/Sensors/TotalPower" {
		t.Fatalf("source %q", m.Source())
	}
	if err := m.Close(); err != nil || b.logouts != 1 {
		t.Fatalf("logout: %v, %d", err, b.logouts)
	}
}

func TestEnergyCounterPreferred(t *testing.T) {
	b := newFakeBMC(t)
	b.set("/redfish/v1/Chassis/1U/EnvironmentMetrics", func(m map[string]any) {
		m["EnergyJoules"] = map[string]any{"Reading": 123456789.5}
	})
	m, _ := NewMeter(b.config())
	if r := read(t, m); !r.Energy || r.Joules != 123456789.5 {
		t.Fatalf("reading %+v", r)
	}
}

func TestLegacyPower(t *testing.T) {
	b := newFakeBMC(t)
	b.set("/redfish/v1/Chassis/1U", func(m map[string]any) {
		delete(m, "EnvironmentMetrics")
		delete(m, "PowerSubsystem")
	})
	m, _ := NewMeter(b.config())
	if r := read(t, m); r.Watts != 344 || r.Energy || !r.Time.IsZero() {
		t.Fatalf("reading %+v", r)
	}
}

func TestPowerSubsystem(t *testing.T) {
	b := newFakeBMC(t)
	b.set("/redfish/v1/Chassis/1U", func(m map[string]any) { delete(m, "EnvironmentMetrics") })
	m, _ := NewMeter(b.config())
	// Bay1 937.4 W; Bay2 is Absent.
	if r := read(t, m); r.Watts != 937.4 {
		t.Fatalf("reading %+v", r)
	}
}

func TestBadPayloads(t *testing.T) {
	for name, edit := range map[string]func(map[string]any){
		"reading is a string": func(m map[string]any) { m["Reading"] = "374" },
		"reading null":        func(m map[string]any) { m["Reading"] = nil },
		"sensor absent":       func(m map[string]any) { m["Status"] = map[string]any{"State": "Absent"} },
		"wrong units":         func(m map[string]any) { m["ReadingUnits"] = "kW" },
		"bad time":            func(m map[string]any) { m["ReadingTime"] = "yesterday" },
	} {
		t.Run(name, func(t *testing.T) {
			b := newFakeBMC(t)
			m, _ := NewMeter(b.config())
			read(t, m) // plan on the good sensor
			b.set("/redfish/v1/Chassis/1U/Sensors/TotalPower", edit)
			if _, err := m.ReadPower(context.Background()); err == nil {
				t.Fatal("accepted")
			}
		})
	}
	b := newFakeBMC(t)
	b.set("/redfish/v1/Chassis/1U", func(m map[string]any) {
		delete(m, "EnvironmentMetrics")
		delete(m, "PowerSubsystem")
		delete(m, "Power")
	})
	m, _ := NewMeter(b.config())
	if _, err := m.ReadPower(context.Background()); err == nil || !strings.Contains(err.Error(), "no chassis with power data") {
		t.Fatalf("no power resources: %v", err)
	}
}

func TestSessionExpiresMidRun(t *testing.T) {
	b := newFakeBMC(t)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	sensorClock(b, t0, func(int) float64 { return 400 })
	m, _ := NewMeter(b.config())
	now := t0
	c := power.NewManualCached(m, func() time.Time { return now })
	for i := 0; i < 6; i++ {
		if i == 3 {
			b.revokeAll() // the BMC drops our session: 401 from now on
		}
		now = now.Add(time.Second)
		c.Poll(context.Background())
		if err := c.LastError(); err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
	}
	s, err := c.Read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The sensor is read at device times 1..6 s (the discovery read was at
	// 0 s): 5 intervals of 1 s at 400 W, without a gap at the re-login.
	if s[0].Joules != 2000 {
		t.Fatalf("energy %v J, want 2000", s[0].Joules)
	}
	if b.logins != 2 || m.Client().Logins() != 2 {
		t.Fatalf("logins bmc=%d client=%d, want 2", b.logins, m.Client().Logins())
	}
}

func TestSlowBMCServesCachedValue(t *testing.T) {
	b := newFakeBMC(t)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	sensorClock(b, t0, func(int) float64 { return 300 })
	cfg := b.config()
	cfg.Timeout = 200 * time.Millisecond
	m, _ := NewMeter(cfg)
	c := power.NewCached(m, 50*time.Millisecond, 200*time.Millisecond)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.WaitFirst(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if s, _ := c.Read(ctx); s[0].Joules >= 600 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	b.mu.Lock()
	b.delay = time.Second // slower than the timeout
	b.mu.Unlock()
	time.Sleep(100 * time.Millisecond)
	before, _ := c.Read(ctx)
	age1 := c.Age()
	time.Sleep(500 * time.Millisecond)
	start := time.Now()
	after, err := c.Read(ctx)
	if took := time.Since(start); took > 50*time.Millisecond {
		t.Fatalf("Read blocked %v on a slow BMC", took)
	}
	if err != nil || after[0].Joules != before[0].Joules {
		t.Fatalf("cached value changed or failed: %v -> %v, %v", before, after, err)
	}
	if age2 := c.Age(); age2 < age1+400*time.Millisecond {
		t.Fatalf("staleness did not grow: %v -> %v", age1, age2)
	}
	if err := c.LastError(); err == nil {
		t.Fatal("LastError nil while the BMC times out")
	}
}

func TestStaleSensor(t *testing.T) {
	// The unmodified mockup never advances ReadingTime: one sample, then
	// the same one again; nothing is integrated and Age grows.
	b := newFakeBMC(t)
	m, _ := NewMeter(b.config())
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	c := power.NewManualCached(m, func() time.Time { return now })
	c.Poll(context.Background())
	for i := 0; i < 5; i++ {
		now = now.Add(time.Second)
		c.Poll(context.Background())
	}
	s, _ := c.Read(context.Background())
	if s[0].Joules != 0 || c.Age() != 5*time.Second || c.LastError() != nil {
		t.Fatalf("energy %v age %v err %v", s[0].Joules, c.Age(), c.LastError())
	}
}

func TestWrongCredentials(t *testing.T) {
	b := newFakeBMC(t)
	cfg := b.config()
	cfg.Password = "wrong-" + password
	m, _ := NewMeter(cfg)
	_, err := m.ReadPower(context.Background())
	if !errors.Is(err, ErrAuth) {
		t.Fatalf("err = %v", err)
	}
	host := strings.TrimPrefix(b.srv.URL, "http://")
	if msg := err.Error(); !strings.Contains(msg, host) || !strings.Contains(msg, "authentication") || strings.Contains(msg, password) {
		t.Fatalf("error must name the BMC and authentication, never the password: %q", msg)
	}
	// Basic auth (sessions off) too.
	b.sessions = false
	cfg.Auth = "basic"
	m, _ = NewMeter(cfg)
	if _, err := m.ReadPower(context.Background()); !errors.Is(err, ErrAuth) || strings.Contains(err.Error(), password) {
		t.Fatalf("basic: %v", err)
	}
}

func TestSessionsOffFallsBackToBasic(t *testing.T) {
	b := newFakeBMC(t)
	b.sessions = false
	m, _ := NewMeter(b.config())
	if r := read(t, m); r.Watts != 374 {
		t.Fatalf("reading %+v", r)
	}
	if b.logins != 0 {
		t.Fatalf("logins %d", b.logins)
	}
}

func TestPasswordNeverPrinted(t *testing.T) {
	cfg := Config{URL: "https://{hostname}-bmc", Username: user, Password: password}
	for _, s := range []string{fmt.Sprint(cfg), fmt.Sprintf("%v %+v %#v %s", cfg, cfg, cfg, cfg)} {
		if strings.Contains(s, password) {
			t.Fatalf("password printed: %s", s)
		}
	}
}

func TestCredentialsFromFileAndEnv(t *testing.T) {
	dir := t.TempDir()
	pf := filepath.Join(dir, "pw")
	os.WriteFile(pf, []byte(password+"\n"), 0o600)
	uf := filepath.Join(dir, "user")
	os.WriteFile(uf, []byte(user+"\n"), 0o600)
	b := newFakeBMC(t)
	cfg := Config{URL: b.srv.URL, UsernameFile: uf, PasswordFile: pf}
	m, err := NewMeter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	read(t, m)
	t.Setenv("TEST_BMC_PW", password)
	cfg = Config{URL: b.srv.URL, Username: user, PasswordEnv: "TEST_BMC_PW"}
	if m, err = NewMeter(cfg); err != nil {
		t.Fatal(err)
	}
	read(t, m)
	cfg.PasswordEnv = "TEST_BMC_PW_UNSET"
	if _, err := NewMeter(cfg); err == nil || !strings.Contains(err.Error(), "redfish.password-env") {
		t.Fatalf("unset env: %v", err)
	}
}

func TestValidate(t *testing.T) {
	ok := Config{URL: "https://{hostname}-bmc.example.com", Username: "u", PasswordFile: "/p"}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for field, c := range map[string]Config{
		"redfish.url":           {Username: "u", PasswordFile: "/p"},
		"redfish.url ":          {URL: "ftp://bmc", Username: "u", PasswordFile: "/p"},
		"redfish.auth":          {URL: "https://bmc", Username: "u", PasswordFile: "/p", Auth: "digest"},
		"redfish.username":      {URL: "https://bmc", PasswordFile: "/p"},
		"redfish.password-file": {URL: "https://bmc", Username: "u"},
		"redfish.external-url":  {URL: "https://bmc", Username: "u", PasswordFile: "/p", ExternalURL: "proxy:9842"},
		"redfish.ca-file":       {URL: "https://bmc", Username: "u", PasswordFile: "/p", CAFile: "/ca", InsecureSkipVerify: true},
		"redfish.timeout":       {URL: "https://bmc", Username: "u", PasswordFile: "/p", Timeout: -1},
		"redfish.url  (a path)": {URL: "https://bmc/redfish/v1", Username: "u", PasswordFile: "/p"},
	} {
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), strings.Fields(field)[0]) {
			t.Fatalf("%s: %v", field, err)
		}
	}
}

func TestHostnamePlaceholder(t *testing.T) {
	c := Config{URL: "https://{hostname}-bmc.mgmt:8443", Hostname: "node042"}
	u, err := c.bmcURL()
	if err != nil || u.String() != "https://node042-bmc.mgmt:8443" {
		t.Fatalf("%v, %v", u, err)
	}
}

// TestThroughProxy runs collector → proxy → fake BMC: the collector sends
// everything to the proxy with the BMC in X-Redfish-Url.
func TestThroughProxy(t *testing.T) {
	b := newFakeBMC(t)
	bmcURL, _ := url.Parse(b.srv.URL)
	port, _ := strconv.Atoi(bmcURL.Port())
	p, err := proxy.New(proxy.Config{Allow: []string{"127.0.0.0/8"}, Ports: []int{port}})
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	var mu sync.Mutex
	ps := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("X-Redfish-Url"))
		mu.Unlock()
		p.ServeHTTP(w, r)
	}))
	defer ps.Close()

	cfg := b.config()
	cfg.URL = "http://{hostname}:" + bmcURL.Port()
	cfg.Hostname = "127.0.0.1"
	cfg.ExternalURL = ps.URL
	m, err := NewMeter(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := read(t, m); r.Watts != 374 {
		t.Fatalf("reading %+v", r)
	}
	if err := m.Close(); err != nil || b.logouts != 1 {
		t.Fatalf("logout through proxy: %v (%d)", err, b.logouts)
	}
	for _, h := range seen {
		if h != "http://127.0.0.1:"+bmcURL.Port() {
			t.Fatalf("proxy saw target %q", h)
		}
	}

	// A path that is not allowed: 403, and the BMC never sees it.
	req, _ := http.NewRequest(http.MethodGet, ps.URL+"/redfish/v1/AccountService/Accounts", nil)
	req.Header.Set("X-Redfish-Url", b.srv.URL)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("AccountService: %d", resp.StatusCode)
	}
	for _, r := range b.requests {
		if strings.Contains(r, "AccountService") {
			t.Fatal("disallowed path reached the BMC")
		}
	}

	// A target outside the allow list: 403, through the collector too.
	cfg.Hostname = "evil.example.com"
	m, _ = NewMeter(cfg)
	if _, err := m.ReadPower(context.Background()); err == nil || !strings.Contains(err.Error(), "HTTP 403") {
		t.Fatalf("outside allow list: %v", err)
	}
}

func FuzzSafePath(f *testing.F) {
	for _, s := range []string{"/redfish/v1/Chassis/1U/Sensors/TotalPower", "/redfish/v1/../x", "https://pdu/redfish/v1/x", "/redfish/v1/a?b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if safePath(s) && (strings.Contains(s, "..") && strings.Contains(s, "/../") || !strings.HasPrefix(s, "/redfish/v1/")) {
			t.Fatalf("unsafe path accepted: %q", s)
		}
	})
}
