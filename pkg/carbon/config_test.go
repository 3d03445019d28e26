package carbon

import (
	"context"
	"github.com/wattrace/wattrace/pkg/reading"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsConstant(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ch, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps := ch.Providers()
	if len(ps) != 1 || ps[0].Name() != "constant" {
		t.Fatalf("chain %v", c.Chain())
	}
	// No Run, no Poll: a local factor is there from the start.
	if f, ok := ch.Factor(); !ok || f.GramsPerKWh != 436 || f.Provider != "constant" || f.Zone != "world" {
		t.Fatalf("factor %+v", f)
	}
}

func TestValidateNamesKeys(t *testing.T) {
	for _, c := range []struct {
		mut  func(*Config)
		keys []string
	}{
		{func(c *Config) { c.Provider = "owid" }, []string{"emissions.provider"}},
		{func(c *Config) { c.Fallback = []string{"constant"} }, []string{"emissions.fallback"}},
		{func(c *Config) { c.Provider = "rte"; c.Fallback = []string{"static", "bogus"} }, []string{"emissions.fallback", "emissions.static.country"}},
		{func(c *Config) { c.Staleness = -time.Second }, []string{"emissions.staleness"}},
		{func(c *Config) { c.Constant.GramsPerKWh = -1 }, []string{"emissions.constant.grams-per-kwh"}},
		{func(c *Config) { c.Constant.GramsPerKWh = 5000 }, []string{"emissions.constant.grams-per-kwh"}},
		{func(c *Config) { c.Provider = "static"; c.Static.Country = "XX" }, []string{"emissions.static.country"}},
		{func(c *Config) { c.Provider = "rte"; c.RTE.URL = "ftp://x"; c.RTE.Refresh = 0 }, []string{"emissions.rte.url", "emissions.rte.refresh"}},
		{func(c *Config) { c.Provider = "rte"; c.RTE.Timeout = 0 }, []string{"emissions.rte.timeout"}},
		{func(c *Config) {
			c.Provider = "electricitymaps"
			c.ElectricityMaps.TokenEnv = ""
		}, []string{"emissions.electricitymaps.zone", "emissions.electricitymaps.token-file"}},
		{func(c *Config) { c.Provider = "watttime" }, []string{"emissions.watttime.region", "emissions.watttime.username", "emissions.watttime.password-file"}},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		err := cfg.Validate()
		if err == nil {
			t.Errorf("%v accepted", c.keys)
			continue
		}
		for _, k := range c.keys {
			if !strings.Contains(err.Error(), k+":") {
				t.Errorf("error %q does not name %s", err, k)
			}
		}
	}
	// Settings of providers outside the chain never stop start-up.
	cfg := DefaultConfig()
	cfg.Static.Country = "XX"
	cfg.RTE.Refresh = 0
	if err := cfg.Validate(); err != nil {
		t.Fatalf("unused providers checked: %v", err)
	}
}

func TestNewSecrets(t *testing.T) {
	dir := t.TempDir()
	tokFile := filepath.Join(dir, "token")
	if err := os.WriteFile(tokFile, []byte("from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"EMAPS_API_TOKEN": "from-env"}
	getenv := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	cfg := DefaultConfig()
	cfg.Provider, cfg.ElectricityMaps.Zone = "electricitymaps", "FR"
	ch, err := New(cfg, Options{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if em := ch.Providers()[0].f.(*ElectricityMaps); em.Token != "from-env" {
		t.Fatalf("token %q", em.Token)
	}
	cfg.ElectricityMaps.TokenFile = tokFile
	ch, err = New(cfg, Options{Getenv: getenv})
	if err != nil {
		t.Fatal(err)
	}
	if em := ch.Providers()[0].f.(*ElectricityMaps); em.Token != "from-file" {
		t.Fatalf("token %q (the file wins)", em.Token)
	}
	if names := cfg.Chain(); len(names) != 2 || names[1] != "constant" {
		t.Fatalf("default fallback %v", names)
	}

	cfg.ElectricityMaps.TokenFile = filepath.Join(dir, "missing")
	if _, err := New(cfg, Options{Getenv: getenv}); err == nil || !strings.Contains(err.Error(), "emissions.electricitymaps.token-file:") {
		t.Fatalf("missing file: %v", err)
	}
	cfg.ElectricityMaps.TokenFile = ""
	delete(env, "EMAPS_API_TOKEN")
	if _, err := New(cfg, Options{Getenv: getenv}); err == nil || !strings.Contains(err.Error(), "emissions.electricitymaps.token-env:") {
		t.Fatalf("unset variable: %v", err)
	}

	pw := filepath.Join(dir, "pw")
	_ = os.WriteFile(pw, []byte("hunter2"), 0o600)
	cfg = DefaultConfig()
	cfg.Provider, cfg.Fallback = "watttime", []string{"static", "constant"}
	cfg.Static.Country = "US"
	cfg.WattTime.Region, cfg.WattTime.Username, cfg.WattTime.PasswordFile = "CAISO_NORTH", "alice", pw
	ch, err = New(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ps := ch.Providers()
	if len(ps) != 3 || ps[0].f.(*WattTime).Password != "hunter2" || ps[1].Zone() != "US" || ps[2].Name() != "constant" {
		t.Fatalf("chain %v", cfg.Chain())
	}
}

// Start-up never fails, and nothing waits, because a provider is down: the
// chain builds with RTE unreachable and serves the fallback at once.
func TestProviderDownAtStart(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connection refused from now on
	cfg := DefaultConfig()
	cfg.Provider, cfg.RTE.URL = "rte", dead.URL
	ch, err := New(cfg, Options{})
	if err != nil {
		t.Fatalf("start-up failed on a provider that is down: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ch.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	var f reading.CarbonFactor
	for ok := false; !ok || ch.Health()[0].Reads == 0; f, ok = ch.Factor() {
		if time.Now().After(deadline) {
			t.Fatal("no factor")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	h := ch.Health()
	if f.Provider != "constant" || !f.Fallback || h[0].Source != "carbon/rte" || h[0].Up || h[0].Errors == 0 || !h[1].Up {
		t.Fatalf("factor %+v health %+v", f, h)
	}
	if in := ch.Intensities(); len(in) != 1 || in[0].Provider != "constant" {
		t.Fatalf("intensities %+v", in)
	}
}

// Each provider keeps its own period: a fast one is read many times while
// a slow one has been read once, and Run returns when ctx ends.
func TestRunOwnPeriods(t *testing.T) {
	fast := NewProvider(&stepper{now: time.Now, start: time.Now(), every: time.Hour, steps: []float64{50}},
		ProviderOptions{Refresh: 10 * time.Millisecond})
	slow := NewProvider(Constant{GramsPerKWh: 436}, ProviderOptions{Refresh: time.Hour})
	ch := NewChain(0, fast, slow)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { ch.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for fast.Health().Reads < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("fast provider read %d times", fast.Health().Reads)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if n := slow.Health().Reads; n != 1 {
		t.Fatalf("slow provider read %d times", n)
	}
}
