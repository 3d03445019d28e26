package discover

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/wattrace/wattrace/internal/testenv"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/ipmi"
	"github.com/wattrace/wattrace/pkg/power/redfish"
	"github.com/wattrace/wattrace/pkg/reading"
)

// bmc serves the DMTF public-rackmount1 mockup (basic auth, not checked)
// and answers HTTP 500 while down is set.
type bmc struct {
	srv  *httptest.Server
	down atomic.Bool
	hits atomic.Int64
}

func newBMC(t *testing.T) *bmc {
	b := &bmc{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.hits.Add(1)
		if b.down.Load() {
			http.Error(w, `{"error":{"code":"Base.1.8.InternalError"}}`, 500)
			return
		}
		body, err := os.ReadFile(filepath.Join("..", "redfish", "testdata", "public-rackmount1",
			strings.TrimPrefix(r.URL.Path, "/redfish/v1"), "index.json"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *bmc) config(t *testing.T) *redfish.Config {
	pw := filepath.Join(t.TempDir(), "password")
	if err := os.WriteFile(pw, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &redfish.Config{URL: b.srv.URL, Username: "wattrace", PasswordFile: pw, Auth: "basic", Timeout: time.Second}
}

func fastConfig(root string) Config {
	return Config{SysfsRoot: root, ProcfsRoot: root, IPMI: "off", LookPath: noTools,
		Interval: 20 * time.Millisecond, Timeout: 20 * time.Millisecond,
		Retry: power.RetryOptions{Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond}}
}

func platformJoules(m power.Meter) (float64, bool) {
	s, err := m.Read(context.Background())
	if err != nil {
		return 0, false
	}
	for _, x := range s {
		if x.Zone == reading.ZonePlatform && x.Source == "redfish" {
			return x.Joules, true
		}
	}
	return 0, false
}

// A configured BMC that answers 500 at start is no longer
// dropped for good with one info line. Start-up logs it at warn, the node
// carries on (here on the estimator, as nothing else measures), the meter
// shows down in Health, and it is adopted once the BMC answers.
func TestOpenRetriesConfiguredRedfish(t *testing.T) {
	b := newBMC(t)
	b.down.Store(true)
	cfg := fastConfig(t.TempDir())
	cfg = withRow(cfg, "redfish", b.config(t))
	core, logs := observer.New(zapcore.InfoLevel)
	m, err := Open(context.Background(), cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer closeMeter(m)
	c, ok := m.(*power.Combined)
	if !ok || m.Name() != "estimator+redfish" {
		t.Fatalf("meter %T %q, want the estimator combined with the retried redfish", m, m.Name())
	}
	warned := 0
	for _, e := range logs.FilterMessage("power meter discovery").All() {
		if e.Level == zapcore.WarnLevel && strings.Contains(e.ContextMap()["result"].(string), "redfish: configured but unusable") {
			warned++
		}
	}
	if warned != 1 {
		t.Fatalf("want one warn discovery line for redfish, got logs %v", logs.All())
	}
	h := c.Health()
	if len(h) != 2 || h[1].Source != "redfish" || h[1].Up || h[1].Errors < 1 {
		t.Fatalf("health while down %+v", h)
	}
	if _, ok := platformJoules(m); ok {
		t.Fatal("platform reported while the BMC is down")
	}

	b.down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := platformJoules(m); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("redfish not adopted after the BMC came back; health %+v", c.Health())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if h := c.Health(); !h[1].Up || h[1].Source != "redfish" {
		t.Fatalf("health after recovery %+v", h)
	}
	recoveredFrom(t, logs, "redfish")
}

// The missing password file: a configuration error that
// stops start-up and names the key, rather than a BMC to wait for.
func TestOpenMissingPasswordFile(t *testing.T) {
	b := newBMC(t)
	cfg := fastConfig(t.TempDir())
	rf := b.config(t)
	rf.PasswordFile = filepath.Join(t.TempDir(), "absent")
	cfg = withRow(cfg, "redfish", rf)
	_, err := Open(context.Background(), cfg, nil)
	if err == nil || !strings.Contains(err.Error(), "power.redfish.password-file") {
		t.Fatalf("err = %v, want one naming power.redfish.password-file", err)
	}
	if b.hits.Load() != 0 {
		t.Fatalf("the BMC was contacted %d times with no password", b.hits.Load())
	}
}

// Per-CPU watts that are NaN, infinite, negative or absurd
// are refused, and the error names the key.
func TestValidateEstimatorWatts(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, 1e308, 1001} {
		for _, key := range []string{"power.estimator.min-watts-per-cpu", "power.estimator.max-watts-per-cpu"} {
			cfg := Config{}
			if strings.Contains(key, "min") {
				cfg.MinWattsPerCPU = v
			} else {
				cfg.MaxWattsPerCPU = v
			}
			err := cfg.Validate()
			if err == nil || !strings.Contains(err.Error(), key) {
				t.Errorf("%s=%g: err %v, want one naming the key", key, v, err)
			}
			if _, err := Open(context.Background(), cfg, nil); err == nil {
				t.Errorf("%s=%g: Open succeeded", key, v)
			}
		}
	}
	if err := (Config{MinWattsPerCPU: 2, MaxWattsPerCPU: 1}).Validate(); err == nil || !strings.Contains(err.Error(), "power.estimator.max-watts-per-cpu") {
		t.Errorf("max < min: %v", err)
	}
	if err := (Config{MinWattsPerCPU: 0.7, MaxWattsPerCPU: 3.5}).Validate(); err != nil {
		t.Errorf("sane values refused: %v", err)
	}
}

func TestValidateNamesKeys(t *testing.T) {
	for want, cfg := range map[string]Config{
		"power.source":            {Source: "magic"},
		"power.ipmi":              {IPMI: "on"},
		"power.capmc":             withRow(Config{}, "capmc", &CapmcSettings{Mode: "yes"}),
		"power.meter-interval":    {Interval: -time.Second},
		"power.max-watts":         {MaxWatts: power.MaxWatts{"pakage": 100}},
		"power.max-watts.package": {MaxWatts: power.MaxWatts{"package": math.NaN()}},
		"power.max-watts.dram":    {MaxWatts: power.MaxWatts{"dram": 1e308}},
		"power.redfish.url":       withRow(Config{}, "redfish", &redfish.Config{URL: "ftp://bmc"}),
	} {
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: err %v, want one naming %s", cfg, err, want)
		}
	}
}

// capmc is reachable from the table (power.capmc=auto) and off by default.
func TestCapmcRow(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "capmc")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '{\"e\":0,\"err_msg\":\"\",\"avg\":350,\"min\":300,\"max\":400,\"window_len\":1}'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	look := func(name string) (string, error) {
		if name == "capmc" {
			return script, nil
		}
		return noTools(name)
	}
	cfg := fastConfig(t.TempDir())
	// A process per read: leave it time on a loaded machine.
	cfg.Interval, cfg.Timeout = 200*time.Millisecond, 2*time.Second
	cfg.LookPath = look
	if m, err := Open(context.Background(), cfg, nil); err != nil || m.Name() != "estimator" {
		t.Fatalf("capmc off by default: %v %v", m, err)
	}
	cfg = withRow(cfg, "capmc", &CapmcSettings{Mode: "auto"})
	m, err := Open(context.Background(), cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer closeMeter(m)
	if m.Name() != "capmc" || m.Estimated() {
		t.Fatalf("meter %q estimated=%v, want capmc measured", m.Name(), m.Estimated())
	}
	if z := zones(t, m); len(z) != 1 || z[0] != "capmc:platform" {
		t.Fatalf("zones %v", z)
	}
}

// power.source=rapl fails loudly; estimator models; auto on a bare tree
// falls back to the estimator.
func TestOpenSources(t *testing.T) {
	root := t.TempDir()
	if _, err := Open(context.Background(), Config{Source: "rapl", SysfsRoot: root}, nil); err == nil || !strings.Contains(err.Error(), "power.source=rapl") {
		t.Fatalf("rapl on an empty tree: %v", err)
	}
	for _, src := range []string{"estimator", "auto"} {
		cfg := fastConfig(root)
		cfg.Source = src
		m, err := Open(context.Background(), cfg, nil)
		if err != nil || m.Name() != "estimator" || !m.Estimated() {
			t.Fatalf("%s: %v %v", src, m, err)
		}
	}
	cfg := fastConfig(testenv.CopyFixture(t, "../testdata/rapl-2socket"))
	cfg.Source = "rapl"
	m, err := Open(context.Background(), cfg, nil)
	if err != nil || m.Name() != "rapl" {
		t.Fatalf("rapl: %v %v", m, err)
	}
}

// dcmiConn is a BMC behind /dev/ipmi0 that is busy until up is set.
type dcmiConn struct{ up *atomic.Bool }

func (c dcmiConn) Do(context.Context, ipmi.Request) ([]byte, error) {
	if !c.up.Load() {
		return []byte{0xC0}, nil // node busy
	}
	return ipmi.EncodePowerReading(ipmi.PowerReading{Current: 250, Timestamp: time.Now(), Active: true}), nil
}

// The OpenIPMI device exists but the BMC is busy
// at start; the meter is retried and adopted for the platform, and hwmon's
// power_meter does not take the zone meanwhile.
func TestOpenRetriesIPMIDevice(t *testing.T) {
	root := t.TempDir()
	copyTree(t, "../testdata/hwmon", root)
	var up atomic.Bool
	cfg := fastConfig(root)
	cfg.IPMI = "auto"
	cfg.openIPMI = func([]string) (ipmi.Conn, string, error) { return dcmiConn{&up}, "/dev/ipmi0", nil }
	core, logs := observer.New(zapcore.WarnLevel)
	m, err := Open(context.Background(), cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	defer closeMeter(m)
	if m.Name() != "ipmi+hwmon" {
		t.Fatalf("meter %q, want ipmi (retried) + hwmon (GPUs only)", m.Name())
	}
	if z := strings.Join(zones(t, m), " "); z != "hwmon:gpu hwmon:gpu" {
		t.Fatalf("zones while the BMC is busy: %q", z)
	}
	// The discovery line tells an operator what is wrong and what happens
	// next: which meter, on which device, why, and that it is retried.
	d := oneLine(t, logs, "power meter discovery")
	if r, _ := d.ContextMap()["result"].(string); d.Level != zapcore.WarnLevel ||
		!strings.HasPrefix(r, "ipmi: configured but unusable, retried in the background: /dev/ipmi0 (DCMI)") || !strings.Contains(r, "node busy") {
		t.Errorf("discovery line at %s: %q, want a warning naming ipmi, /dev/ipmi0, the retry and the BMC's node busy", d.Level, r)
	}
	up.Store(true)
	deadline := time.Now().Add(5 * time.Second)
	for {
		if z := strings.Join(zones(t, m), " "); z == "ipmi:platform hwmon:gpu hwmon:gpu" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ipmi not adopted: zones %v", zones(t, m))
		}
		time.Sleep(10 * time.Millisecond)
	}
	recoveredFrom(t, logs, "ipmi")
}

// oneLine is the one log entry with message msg; any other count fails.
func oneLine(t *testing.T, logs *observer.ObservedLogs, msg string) observer.LoggedEntry {
	t.Helper()
	es := logs.FilterMessage(msg).All()
	if len(es) != 1 {
		t.Fatalf("%d %q lines, want 1; logs %v", len(es), msg, logs.All())
	}
	return es[0]
}

// recoveredFrom checks the line that says a retried meter came back: a
// warning (an operator saw the earlier one), naming the meter and how
// many attempts it took.
func recoveredFrom(t *testing.T, logs *observer.ObservedLogs, source string) {
	t.Helper()
	// The retrier adopts the meter and then logs: the meter can show up
	// in Read a moment before its line does.
	const msg = "configured power meter recovered and adopted"
	for deadline := time.Now().Add(5 * time.Second); logs.FilterMessage(msg).Len() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	e := oneLine(t, logs, msg)
	f := e.ContextMap()
	if n, _ := f["attempts"].(uint64); e.Level != zapcore.WarnLevel || f["source"] != source || n < 1 {
		t.Errorf("recovery line at %s with %v, want a warning with source %s and attempts >= 1", e.Level, f, source)
	}
}

// withRow returns c with a row's own settings set, as Declare would after
// decoding them.
func withRow(c Config, name string, own any) Config {
	rows := map[string]any{name: own}
	for k, v := range c.rows {
		if k != name {
			rows[k] = v
		}
	}
	c.rows = rows
	return c
}
