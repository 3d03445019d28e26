package carbon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/reading"
)

// Provider names, the values of emissions.provider and emissions.fallback.
const (
	NameConstant        = "constant"
	NameStatic          = "static"
	NameRTE             = "rte"
	NameElectricityMaps = "electricitymaps"
	NameWattTime        = "watttime"
)

var knownProviders = []string{NameConstant, NameStatic, NameRTE, NameElectricityMaps, NameWattTime}

// Config is the `emissions` section. Keys are given in each field's
// comment; DefaultConfig holds the defaults.
type Config struct {
	// Provider drives the integration (emissions.provider).
	Provider string `mapstructure:"provider"`
	// Fallback is tried in order once the driver is older than Staleness
	// or has no value (emissions.fallback). Nil means [constant] unless
	// the driver is constant.
	Fallback []string `mapstructure:"fallback"`
	// Staleness is the age beyond which a provider is passed over
	// (emissions.staleness); 0 never falls back for age.
	Staleness time.Duration `mapstructure:"staleness"`

	Constant struct {
		// GramsPerKWh (emissions.constant.grams-per-kwh).
		GramsPerKWh float64 `mapstructure:"grams-per-kwh"`
	} `mapstructure:"constant"`
	Static struct {
		// Country, ISO 3166-1 alpha-2 or alpha-3 (emissions.static.country).
		Country string `mapstructure:"country"`
	} `mapstructure:"static"`
	RTE struct {
		URL     string        `mapstructure:"url"`     // emissions.rte.url
		Refresh time.Duration `mapstructure:"refresh"` // emissions.rte.refresh
		Timeout time.Duration `mapstructure:"timeout"` // emissions.rte.timeout
	} `mapstructure:"rte"`
	ElectricityMaps struct {
		Zone      string        `mapstructure:"zone"`       // emissions.electricitymaps.zone
		TokenFile string        `mapstructure:"token-file"` // emissions.electricitymaps.token-file
		TokenEnv  string        `mapstructure:"token-env"`  // emissions.electricitymaps.token-env
		URL       string        `mapstructure:"url"`        // emissions.electricitymaps.url
		Refresh   time.Duration `mapstructure:"refresh"`    // emissions.electricitymaps.refresh
		Timeout   time.Duration `mapstructure:"timeout"`    // emissions.electricitymaps.timeout
	} `mapstructure:"electricitymaps"`
	WattTime struct {
		Region       string        `mapstructure:"region"`        // emissions.watttime.region
		Username     string        `mapstructure:"username"`      // emissions.watttime.username
		PasswordFile string        `mapstructure:"password-file"` // emissions.watttime.password-file
		URL          string        `mapstructure:"url"`           // emissions.watttime.url
		Refresh      time.Duration `mapstructure:"refresh"`       // emissions.watttime.refresh
		Timeout      time.Duration `mapstructure:"timeout"`       // emissions.watttime.timeout
	} `mapstructure:"watttime"`
}

// DefaultConfig: the constant world average drives, so grams appear out of
// the box; network providers refresh every 5 minutes (RTE publishes every
// 15, Electricity Maps hourly, WattTime every 5) with a 10 s timeout, and a
// factor older than 2 hours is passed over (eco2mix's real-time rows lag
// real time by up to an hour).
func DefaultConfig() Config {
	var c Config
	c.Provider = NameConstant
	c.Staleness = 2 * time.Hour
	c.Constant.GramsPerKWh = DefaultGramsPerKWh
	c.RTE.URL = DefaultRTEURL
	c.RTE.Refresh, c.RTE.Timeout = 5*time.Minute, 10*time.Second
	c.ElectricityMaps.URL = DefaultElectricityMapsURL
	c.ElectricityMaps.TokenEnv = "EMAPS_API_TOKEN"
	c.ElectricityMaps.Refresh, c.ElectricityMaps.Timeout = 5*time.Minute, 10*time.Second
	c.WattTime.URL = DefaultWattTimeURL
	c.WattTime.Refresh, c.WattTime.Timeout = 5*time.Minute, 10*time.Second
	return c
}

// Chain returns the providers in order: the driver, then the fallbacks
// (defaulted as Fallback says).
func (c *Config) Chain() []string {
	fb := c.Fallback
	if fb == nil && c.Provider != NameConstant {
		fb = []string{NameConstant}
	}
	return append([]string{c.Provider}, fb...)
}

func (c *Config) uses(name string) bool {
	for _, n := range c.Chain() {
		if n == name {
			return true
		}
	}
	return false
}

// Validate checks the section; every error names its key. Only the
// providers in the chain are checked, so an unused provider's settings
// never stop start-up.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	known := func(n string) bool {
		for _, k := range knownProviders {
			if n == k {
				return true
			}
		}
		return false
	}
	if !known(c.Provider) {
		bad("emissions.provider", "unknown provider %q (one of %s)", c.Provider, strings.Join(knownProviders, ", "))
	}
	seen := map[string]bool{c.Provider: true}
	for _, f := range c.Fallback {
		switch {
		case !known(f):
			bad("emissions.fallback", "unknown provider %q (one of %s)", f, strings.Join(knownProviders, ", "))
		case seen[f]:
			bad("emissions.fallback", "provider %q listed twice (or is also emissions.provider)", f)
		}
		seen[f] = true
	}
	if c.Staleness < 0 {
		bad("emissions.staleness", "negative (%v)", c.Staleness)
	}
	period := func(prefix string, refresh, timeout time.Duration) {
		if refresh <= 0 {
			bad(prefix+".refresh", "must be positive, got %v", refresh)
		}
		if timeout <= 0 {
			bad(prefix+".timeout", "must be positive, got %v", timeout)
		}
	}
	checkURL := func(key, u string) {
		p, err := url.Parse(u)
		if err != nil || (p.Scheme != "http" && p.Scheme != "https") || p.Host == "" {
			bad(key, "not an http(s) URL: %q", u)
		}
	}
	if c.uses(NameConstant) {
		if err := reading.CheckGauge(c.Constant.GramsPerKWh, MaxGramsPerKWh); err != nil {
			bad("emissions.constant.grams-per-kwh", "%v (want 0 to %d g/kWh)", err, MaxGramsPerKWh)
		}
	}
	if c.uses(NameStatic) {
		if _, err := NewStatic(c.Static.Country); err != nil {
			errs = append(errs, err)
		}
	}
	if c.uses(NameRTE) {
		checkURL("emissions.rte.url", c.RTE.URL)
		period("emissions.rte", c.RTE.Refresh, c.RTE.Timeout)
	}
	if c.uses(NameElectricityMaps) {
		e := c.ElectricityMaps
		if strings.TrimSpace(e.Zone) == "" {
			bad("emissions.electricitymaps.zone", "required (an Electricity Maps zone such as DE or US-CAL-CISO)")
		}
		if e.TokenFile == "" && e.TokenEnv == "" {
			bad("emissions.electricitymaps.token-file", "required, or emissions.electricitymaps.token-env")
		}
		checkURL("emissions.electricitymaps.url", e.URL)
		period("emissions.electricitymaps", e.Refresh, e.Timeout)
	}
	if c.uses(NameWattTime) {
		w := c.WattTime
		if strings.TrimSpace(w.Region) == "" {
			bad("emissions.watttime.region", "required (a WattTime region such as CAISO_NORTH)")
		}
		if w.Username == "" {
			bad("emissions.watttime.username", "required")
		}
		if w.PasswordFile == "" {
			bad("emissions.watttime.password-file", "required")
		}
		checkURL("emissions.watttime.url", w.URL)
		period("emissions.watttime", w.Refresh, w.Timeout)
	}
	return errors.Join(errs...)
}

// Options are the dependencies New passes to the providers.
type Options struct {
	Log *zap.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Client is the HTTP client for network providers (default: one of
	// their own each).
	Client *http.Client
	// Getenv looks up the token variable (default os.LookupEnv).
	Getenv func(string) (string, bool)
}

// New validates c, reads the secrets and builds the chain. It queries
// nothing: a provider that is down never fails start-up; only bad
// configuration does (an unknown key value, a missing token file or
// variable), with an error naming the key. Call Run to start the
// background reads.
func New(c Config, o Options) (*Chain, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if o.Getenv == nil {
		o.Getenv = os.LookupEnv
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	var ps []*Provider
	for _, name := range c.Chain() {
		f, po, err := c.fetcher(name, o)
		if err != nil {
			return nil, err
		}
		po.Log, po.Now = o.Log, o.Now
		p := NewProvider(f, po)
		if p.fixed {
			// Local values need no network: have them before Run, so
			// the first interval already has a factor.
			if err := p.Poll(context.Background()); err != nil {
				return nil, err
			}
		}
		ps = append(ps, p)
	}
	return NewChain(c.Staleness, ps[0], ps[1:]...), nil
}

func (c *Config) fetcher(name string, o Options) (Fetcher, ProviderOptions, error) {
	switch name {
	case NameConstant:
		return Constant{GramsPerKWh: c.Constant.GramsPerKWh}, ProviderOptions{Refresh: time.Hour}, nil
	case NameStatic:
		s, err := NewStatic(c.Static.Country)
		return s, ProviderOptions{Refresh: time.Hour}, err
	case NameRTE:
		return &RTE{URL: c.RTE.URL, Client: o.Client}, ProviderOptions{Refresh: c.RTE.Refresh, Timeout: c.RTE.Timeout}, nil
	case NameElectricityMaps:
		e := c.ElectricityMaps
		tok, err := secret("emissions.electricitymaps.token-file", e.TokenFile, "emissions.electricitymaps.token-env", e.TokenEnv, o.Getenv)
		if err != nil {
			return nil, ProviderOptions{}, err
		}
		return &ElectricityMaps{URL: e.URL, ZoneName: e.Zone, Token: tok, Client: o.Client},
			ProviderOptions{Refresh: e.Refresh, Timeout: e.Timeout}, nil
	case NameWattTime:
		w := c.WattTime
		pw, err := secret("emissions.watttime.password-file", w.PasswordFile, "", "", o.Getenv)
		if err != nil {
			return nil, ProviderOptions{}, err
		}
		return &WattTime{URL: w.URL, Region: w.Region, Username: w.Username, Password: pw, Client: o.Client, Now: o.Now},
			ProviderOptions{Refresh: w.Refresh, Timeout: w.Timeout}, nil
	}
	return nil, ProviderOptions{}, fmt.Errorf("emissions.provider: unknown provider %q", name)
}

// secret reads a credential from a file (preferred) or an environment
// variable. Errors name the key and the file or variable, never the value.
func secret(fileKey, file, envKey, env string, getenv func(string) (string, bool)) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("%s: %w", fileKey, err)
		}
		s := strings.TrimSpace(string(b))
		if s == "" {
			return "", fmt.Errorf("%s: %s is empty", fileKey, file)
		}
		return s, nil
	}
	if env != "" {
		s, ok := getenv(env)
		if !ok || strings.TrimSpace(s) == "" {
			return "", fmt.Errorf("%s: variable %s is unset or empty", envKey, env)
		}
		return strings.TrimSpace(s), nil
	}
	return "", fmt.Errorf("%s: required", fileKey)
}
