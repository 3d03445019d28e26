package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"

	"github.com/wattrace/wattrace/pkg/units"
	"github.com/wattrace/wattrace/pkg/units/store"
)

// EnvPrefix is prepended (with an underscore) to every environment
// variable: WATTRACE_API_STORE_PATH sets store.path. Its own prefix keeps
// the exporter's WATTRACE_WEB_LISTEN_ADDRESS from reaching this server on
// a host that runs both.
const EnvPrefix = "WATTRACE_API"

// Keys: flag names, YAML keys and (upper-cased) environment variables.
const (
	KeyConfigFile = "config.file"

	KeyWebListenAddress = "web.listen-address"
	KeyWebConfigFile    = "web.config.file"
	KeyLogLevel         = "log.level"
	KeyLogFormat        = "log.format"
	KeyCluster          = "cluster"

	KeyStoreDriver         = "store.driver"
	KeyStorePath           = "store.path"
	KeyStoreDSNFile        = "store.dsn-file"
	KeyStoreRetention      = "store.retention"
	KeyStoreBackupDir      = "store.backup.dir"
	KeyStoreBackupInterval = "store.backup.interval"
	KeyStoreBackupKeep     = "store.backup.keep"

	KeyTSDBURL        = "tsdb.url"
	KeyTSDBHTTPConfig = "tsdb.http-config-file"
	KeyTSDBTimeout    = "tsdb.timeout"

	KeyUpdaterInterval     = "updater.interval"
	KeyUpdaterDelay        = "updater.delay"
	KeyUpdaterMaxWindow    = "updater.max-window"
	KeyUpdaterLookback     = "updater.lookback"
	KeyUpdaterSelector     = "updater.selector"
	KeyUpdaterClusterLabel = "updater.cluster-label"
	KeyUpdaterKinds        = "updater.kinds"
	KeyUpdaterSeriesKeep   = "updater.series-retention"

	KeySlurmSource     = "slurm.source"
	KeySlurmInterval   = "slurm.interval"
	KeySlurmLookback   = "slurm.lookback"
	KeySlurmSacct      = "slurm.sacct.path"
	KeySlurmRestdURL   = "slurm.restd.url"
	KeySlurmRestdUser  = "slurm.restd.user"
	KeySlurmRestdToken = "slurm.restd.token-file"

	KeyAPIUserHeader     = "api.user-header"
	KeyAPITrustedProxies = "api.trusted-proxies"
	KeyAPIAdmins         = "api.admins"
	KeyAPIMaxRange       = "api.max-range"
	KeyAPITokensFile     = "api.tokens-file"
)

// DefaultListenAddress is the API server's port, next to the exporter's 9841.
const DefaultListenAddress = ":9842"

// Config is the API server's configuration.
type Config struct {
	ConfigFile  string
	ShowVersion bool
	Web         Web
	Log         Log
	// Cluster names the units of this site (the updater's and Slurm's).
	Cluster string
	Store   Store
	TSDB    TSDB
	Updater Updater
	Slurm   Slurm
	API     API
}

// Web is the HTTP server: addresses and exporter-toolkit's web config
// (TLS, basic auth).
type Web struct {
	ListenAddresses []string
	ConfigFile      string
}

// Log is the logger's level and format (logfmt or json).
type Log struct{ Level, Format string }

// Store says where units are kept.
type Store struct {
	Driver string // store.SQLite or store.Postgres
	Path   string // SQLite file
	// DSNFile holds the PostgreSQL connection string (it may carry a
	// password, so never a flag); DSN is its content.
	DSNFile        string
	DSN            string
	Retention      time.Duration // 0: keep forever
	BackupDir      string        // SQLite online backups; "" = none
	BackupInterval time.Duration
	BackupKeep     int
}

// TSDB is the Prometheus-compatible query API the updater reads.
type TSDB struct {
	URL string
	// HTTPConfigFile is a Prometheus HTTP client configuration (basic
	// auth, bearer token, TLS, extra headers such as X-Scope-OrgID).
	HTTPConfigFile string
	Timeout        time.Duration
}

// Updater tunes the TSDB update cycle (pkg/units/updater.Config).
type Updater struct {
	Interval, Delay, MaxWindow, Lookback, SeriesRetention time.Duration
	Selector, ClusterLabel                                string
	Kinds                                                 []units.Kind
}

// Slurm says where Slurm job metadata comes from.
type Slurm struct {
	// Source: auto (restd when slurm.restd.url is set, else sacct when
	// found), restd, sacct or none.
	Source         string
	Interval       time.Duration
	Lookback       time.Duration
	SacctPath      string
	RestdURL       string
	RestdUser      string
	RestdTokenFile string
}

// API is the access control of the HTTP API (pkg/units/api).
type API struct {
	// UserHeader names the header a trusted proxy sets to the user.
	UserHeader string
	// TrustedProxies are the networks (CIDR or address) whose UserHeader
	// is believed.
	TrustedProxies []*net.IPNet
	// Admins see every unit.
	Admins []string
	// MaxRange is the longest time range a query may ask for.
	MaxRange time.Duration
	// TokensFile maps users to the SHA-256 of their bearer tokens
	// (pkg/units/api.LoadTokens).
	TokensFile string
}

// Allowed values.
var (
	LogLevels    = []string{"debug", "info", "warn", "error"}
	LogFormats   = []string{"logfmt", "json"}
	SlurmSources = []string{"auto", "restd", "sacct", "none"}
)

// notSettings are flags that only make sense on the command line.
var notSettings = map[string]bool{"version": true}

// NewFlagSet returns the server's flags with their defaults.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false
	fs.String(KeyConfigFile, "", "YAML configuration file; keys are flag names without the leading dashes, e.g. store.path: /var/lib/wattrace/units.db.")
	fs.Bool("version", false, "Print version information and exit.")
	fs.StringSlice(KeyWebListenAddress, []string{DefaultListenAddress}, "Addresses to listen on for the API. Repeatable.")
	fs.String(KeyWebConfigFile, "", "Path to an exporter-toolkit web configuration file that enables TLS, client certificates or basic auth.")
	fs.String(KeyLogLevel, "info", "Log level: "+strings.Join(LogLevels, ", ")+".")
	fs.String(KeyLogFormat, "logfmt", "Log format: "+strings.Join(LogFormats, ", ")+".")
	fs.String(KeyCluster, "default", "Name of the cluster the units belong to (Slurm's ClusterName for a Slurm site).")

	fs.String(KeyStoreDriver, store.SQLite, "Units database: sqlite (one file) or postgres.")
	fs.String(KeyStorePath, "/var/lib/wattrace/units.db", "SQLite database file; its directory must exist.")
	fs.String(KeyStoreDSNFile, "", "File holding the PostgreSQL connection string (postgres://user:password@host/db?sslmode=verify-full); required for postgres.")
	fs.Duration(KeyStoreRetention, 2*365*24*time.Hour, "Delete units that ended longer ago, and their daily usage. 0 = keep forever.")
	fs.String(KeyStoreBackupDir, "", "Directory for online SQLite backups (units-<time>.db). Empty: none.")
	fs.Duration(KeyStoreBackupInterval, 24*time.Hour, "Time between online backups.")
	fs.Int(KeyStoreBackupKeep, 7, "Backups kept in store.backup.dir; older ones are deleted.")

	fs.String(KeyTSDBURL, "", "Base URL of the Prometheus-compatible query API holding the exporters' series (Prometheus, VictoriaMetrics, Thanos, Mimir's /prometheus). Required.")
	fs.String(KeyTSDBHTTPConfig, "", "Prometheus HTTP client configuration for the TSDB (basic_auth, authorization, tls_config, http_headers).")
	fs.Duration(KeyTSDBTimeout, 2*time.Minute, "Timeout of one TSDB query.")

	fs.Duration(KeyUpdaterInterval, time.Minute, "Time between update cycles.")
	fs.Duration(KeyUpdaterDelay, time.Minute, "How far behind now a cycle reads, so late samples have landed: more than the scrape interval plus ingestion delay (VictoriaMetrics: -search.latencyOffset, 30s).")
	fs.Duration(KeyUpdaterMaxWindow, time.Hour, "Longest window one cycle reads; a longer outage is caught up in steps.")
	fs.Duration(KeyUpdaterLookback, 6*time.Hour, "How far back the first cycle of an empty store reads.")
	fs.String(KeyUpdaterSelector, "", "Extra label matchers for the updater's queries, e.g. job=\"wattrace\".")
	fs.String(KeyUpdaterClusterLabel, "", "Label naming a series' cluster (e.g. an external label); the cluster setting where absent.")
	fs.StringSlice(KeyUpdaterKinds, nil, "Workload levels read: job, pod, vm, container, unit. Empty: all.")
	fs.Duration(KeyUpdaterSeriesKeep, 24*time.Hour, "How long an ended unit's series state is kept, so series that return (an exporter that was unreachable) are not counted twice.")

	fs.String(KeySlurmSource, "auto", "Slurm job metadata: auto (restd when slurm.restd.url is set, else sacct when found), restd, sacct or none.")
	fs.Duration(KeySlurmInterval, 15*time.Minute, "Time between reads of Slurm's accounting.")
	fs.Duration(KeySlurmLookback, 24*time.Hour, "How far back the first read goes.")
	fs.String(KeySlurmSacct, "sacct", "The sacct command.")
	fs.String(KeySlurmRestdURL, "", "slurmrestd base URL, e.g. http://slurmrestd:6820 (the 22.05 API, /slurmdb/v0.0.38).")
	fs.String(KeySlurmRestdUser, "", "User name sent to slurmrestd (X-SLURM-USER-NAME); must be a Slurm operator to list every job.")
	fs.String(KeySlurmRestdToken, "", "File holding slurmrestd's JWT (X-SLURM-USER-TOKEN), re-read before each request.")

	fs.String(KeyAPIUserHeader, "X-Grafana-User", "Header a trusted proxy (Grafana) sets to the requesting user.")
	fs.StringSlice(KeyAPITrustedProxies, nil, "Networks (CIDR or address) whose user header is believed. Repeatable.")
	fs.StringSlice(KeyAPIAdmins, nil, "Users who see every unit. Repeatable.")
	fs.Duration(KeyAPIMaxRange, 366*24*time.Hour, "Longest time range one query may ask for.")
	fs.String(KeyAPITokensFile, "", "YAML file mapping users to the hex SHA-256 of their bearer tokens (wattrace acct --token). Empty: no tokens.")
	return fs
}

// EnvVar returns the environment variable that sets key.
func EnvVar(key string) string {
	return EnvPrefix + "_" + strings.ToUpper(envReplacer.Replace(key))
}

var envReplacer = strings.NewReplacer(".", "_", "-", "_")

// Load parses args and merges them with the environment, the file and the
// defaults (flags over environment over file over defaults), then
// validates the result.
func Load(args []string) (*Config, error) {
	fs := NewFlagSet("wattrace-api")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if len(fs.Args()) > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	// "::" keeps dotted keys flat.
	v := viper.NewWithOptions(viper.KeyDelimiter("::"))
	v.SetEnvPrefix(EnvPrefix)
	v.SetEnvKeyReplacer(envReplacer)
	v.AutomaticEnv()
	keys := map[string]bool{}
	var bindErr error
	fs.VisitAll(func(f *pflag.Flag) {
		if notSettings[f.Name] {
			return
		}
		keys[f.Name] = true
		if err := v.BindPFlag(f.Name, f); err != nil && bindErr == nil {
			bindErr = fmt.Errorf("binding flag %s: %w", f.Name, err)
		}
	})
	if bindErr != nil {
		return nil, bindErr
	}
	cfgFile := v.GetString(KeyConfigFile)
	if cfgFile != "" {
		settings, err := readFile(cfgFile, keys)
		if err != nil {
			return nil, err
		}
		if err := v.MergeConfigMap(settings); err != nil {
			return nil, fmt.Errorf("merging %s: %w", cfgFile, err)
		}
	}
	c, err := decode(v)
	if err != nil {
		return nil, err
	}
	c.ConfigFile = cfgFile
	c.ShowVersion, _ = fs.GetBool("version")
	if c.ShowVersion {
		return c, nil
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// readFile reads the YAML file into a flat map keyed by setting key, flat
// ("store.path: x") or nested ("store: {path: x}"); unknown keys are an
// error so a typo never falls back to a default.
func readFile(path string, known map[string]bool) (map[string]any, error) {
	fv := viper.NewWithOptions(viper.KeyDelimiter("::"))
	fv.SetConfigFile(path)
	fv.SetConfigType("yaml")
	if err := fv.ReadInConfig(); err != nil {
		return nil, fmt.Errorf("reading config file %s: %w", path, err)
	}
	out := map[string]any{}
	var rest []string
	for _, k := range fv.AllKeys() {
		key := strings.ReplaceAll(k, "::", ".")
		if !known[key] || key == KeyConfigFile {
			rest = append(rest, key)
			continue
		}
		if _, dup := out[key]; dup {
			return nil, fmt.Errorf("config file %s: key %s is set twice (flat and nested)", path, key)
		}
		out[key] = fv.Get(k)
	}
	if len(rest) > 0 {
		sort.Strings(rest)
		return nil, fmt.Errorf("config file %s: unknown keys %s", path, strings.Join(rest, ", "))
	}
	return out, nil
}

type decoder struct {
	v    *viper.Viper
	errs []error
}

func (d *decoder) fail(key string, val any, why string) {
	d.errs = append(d.errs, fmt.Errorf("invalid value %q for %s: %s", fmt.Sprint(val), key, why))
}

func (d *decoder) string(key string) string { return strings.TrimSpace(d.v.GetString(key)) }

func (d *decoder) strings(key string) []string {
	var out []string
	for _, s := range cast.ToStringSlice(d.v.Get(key)) {
		for _, p := range strings.Split(s, ",") { // environment: one string
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}

func (d *decoder) duration(key string) time.Duration {
	val := d.v.Get(key)
	switch t := val.(type) {
	case time.Duration:
		return t
	case string:
		// A bare number would be nanoseconds: insist on a unit.
		if dur, err := time.ParseDuration(strings.TrimSpace(t)); err == nil {
			return dur
		}
	}
	d.fail(key, val, "want a duration such as 5s or 1m")
	return 0
}

func (d *decoder) int(key string) int {
	val := d.v.Get(key)
	i, err := cast.ToIntE(val)
	if err != nil {
		d.fail(key, val, "want an integer")
	}
	return i
}

func (d *decoder) networks(key string) []*net.IPNet {
	var out []*net.IPNet
	for _, s := range d.strings(key) {
		if !strings.Contains(s, "/") {
			if ip := net.ParseIP(s); ip != nil {
				bits := 128
				if ip.To4() != nil {
					ip, bits = ip.To4(), 32
				}
				out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
				continue
			}
		}
		_, n, err := net.ParseCIDR(s)
		if err != nil {
			d.fail(key, s, "want a CIDR such as 10.0.0.0/8 or an address")
			continue
		}
		out = append(out, n)
	}
	return out
}

func decode(v *viper.Viper) (*Config, error) {
	d := decoder{v: v}
	c := &Config{
		Web:     Web{ListenAddresses: d.strings(KeyWebListenAddress), ConfigFile: d.string(KeyWebConfigFile)},
		Log:     Log{Level: d.string(KeyLogLevel), Format: d.string(KeyLogFormat)},
		Cluster: d.string(KeyCluster),
		Store: Store{
			Driver: d.string(KeyStoreDriver), Path: d.string(KeyStorePath), DSNFile: d.string(KeyStoreDSNFile),
			Retention: d.duration(KeyStoreRetention), BackupDir: d.string(KeyStoreBackupDir),
			BackupInterval: d.duration(KeyStoreBackupInterval), BackupKeep: d.int(KeyStoreBackupKeep),
		},
		TSDB: TSDB{URL: d.string(KeyTSDBURL), HTTPConfigFile: d.string(KeyTSDBHTTPConfig), Timeout: d.duration(KeyTSDBTimeout)},
		Updater: Updater{
			Interval: d.duration(KeyUpdaterInterval), Delay: d.duration(KeyUpdaterDelay),
			MaxWindow: d.duration(KeyUpdaterMaxWindow), Lookback: d.duration(KeyUpdaterLookback),
			SeriesRetention: d.duration(KeyUpdaterSeriesKeep),
			Selector:        d.string(KeyUpdaterSelector), ClusterLabel: d.string(KeyUpdaterClusterLabel),
		},
		Slurm: Slurm{
			Source: d.string(KeySlurmSource), Interval: d.duration(KeySlurmInterval), Lookback: d.duration(KeySlurmLookback),
			SacctPath: d.string(KeySlurmSacct), RestdURL: d.string(KeySlurmRestdURL),
			RestdUser: d.string(KeySlurmRestdUser), RestdTokenFile: d.string(KeySlurmRestdToken),
		},
		API: API{
			UserHeader: d.string(KeyAPIUserHeader), TrustedProxies: d.networks(KeyAPITrustedProxies),
			Admins: d.strings(KeyAPIAdmins), MaxRange: d.duration(KeyAPIMaxRange),
			TokensFile: d.string(KeyAPITokensFile),
		},
	}
	for _, k := range d.strings(KeyUpdaterKinds) {
		c.Updater.Kinds = append(c.Updater.Kinds, units.Kind(k))
	}
	if len(d.errs) > 0 {
		return nil, errors.Join(d.errs...)
	}
	return c, nil
}

// Validate checks the configuration; each error names its key. It reads
// the DSN file, so a missing one stops start-up.
func (c *Config) Validate() error {
	var errs []error
	bad := func(key string, val any, why string) {
		errs = append(errs, fmt.Errorf("invalid value %q for %s: %s", fmt.Sprint(val), key, why))
	}
	oneOf := func(key, val string, allowed []string) {
		for _, a := range allowed {
			if val == a {
				return
			}
		}
		bad(key, val, "allowed: "+strings.Join(allowed, ", "))
	}
	oneOf(KeyLogLevel, c.Log.Level, LogLevels)
	oneOf(KeyLogFormat, c.Log.Format, LogFormats)
	oneOf(KeySlurmSource, c.Slurm.Source, SlurmSources)
	oneOf(KeyStoreDriver, c.Store.Driver, []string{store.SQLite, store.Postgres})
	if len(c.Web.ListenAddresses) == 0 {
		bad(KeyWebListenAddress, "", "at least one address is required")
	}
	for _, a := range c.Web.ListenAddresses {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad(KeyWebListenAddress, a, "want host:port or :port")
		}
	}
	if c.Cluster == "" {
		bad(KeyCluster, "", "a cluster name is required")
	}
	switch c.Store.Driver {
	case store.SQLite:
		if c.Store.Path == "" {
			bad(KeyStorePath, "", "the SQLite file is required")
		}
	case store.Postgres:
		if c.Store.DSNFile == "" {
			bad(KeyStoreDSNFile, "", "required with store.driver postgres")
		} else if b, err := os.ReadFile(c.Store.DSNFile); err != nil {
			bad(KeyStoreDSNFile, c.Store.DSNFile, err.Error())
		} else if c.Store.DSN = strings.TrimSpace(string(b)); c.Store.DSN == "" {
			bad(KeyStoreDSNFile, c.Store.DSNFile, "the file is empty")
		}
		if c.Store.BackupDir != "" {
			bad(KeyStoreBackupDir, c.Store.BackupDir, "online backups are for SQLite; back PostgreSQL up with pg_dump or a standby")
		}
	}
	if c.Store.BackupDir != "" {
		if fi, err := os.Stat(c.Store.BackupDir); err != nil || !fi.IsDir() {
			bad(KeyStoreBackupDir, c.Store.BackupDir, "not a directory")
		}
		if c.Store.BackupInterval < time.Minute {
			bad(KeyStoreBackupInterval, c.Store.BackupInterval, "at least 1m")
		}
		if c.Store.BackupKeep < 1 {
			bad(KeyStoreBackupKeep, c.Store.BackupKeep, "at least 1")
		}
	}
	if c.Store.Retention < 0 {
		bad(KeyStoreRetention, c.Store.Retention, "must not be negative")
	}
	if c.TSDB.URL == "" {
		bad(KeyTSDBURL, "", "the TSDB's query API URL is required")
	} else if u, err := url.Parse(c.TSDB.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(KeyTSDBURL, c.TSDB.URL, "want an http(s) URL")
	}
	if c.TSDB.Timeout <= 0 {
		bad(KeyTSDBTimeout, c.TSDB.Timeout, "must be positive")
	}
	positive := map[string]time.Duration{
		KeyUpdaterInterval: c.Updater.Interval, KeyUpdaterMaxWindow: c.Updater.MaxWindow,
		KeyUpdaterLookback: c.Updater.Lookback, KeyUpdaterSeriesKeep: c.Updater.SeriesRetention,
		KeySlurmInterval: c.Slurm.Interval, KeySlurmLookback: c.Slurm.Lookback, KeyAPIMaxRange: c.API.MaxRange,
	}
	for k, d := range positive {
		if d <= 0 {
			bad(k, d, "must be positive")
		}
	}
	if c.Updater.Delay < 0 {
		bad(KeyUpdaterDelay, c.Updater.Delay, "must not be negative")
	}
	if c.Slurm.Interval > 0 && c.Slurm.Interval < time.Minute {
		bad(KeySlurmInterval, c.Slurm.Interval, "at least 1m: sacct and slurmdbd are not for polling")
	}
	for _, k := range c.Updater.Kinds {
		if !k.Valid() {
			bad(KeyUpdaterKinds, k, "allowed: job, pod, vm, container, unit")
		}
	}
	if c.Slurm.Source == "restd" && c.Slurm.RestdURL == "" {
		bad(KeySlurmRestdURL, "", "required with slurm.source restd")
	}
	if c.Slurm.RestdURL != "" {
		if u, err := url.Parse(c.Slurm.RestdURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad(KeySlurmRestdURL, c.Slurm.RestdURL, "want an http(s) URL")
		}
		if c.Slurm.RestdUser == "" {
			bad(KeySlurmRestdUser, "", "required with slurm.restd.url")
		}
		if c.Slurm.RestdTokenFile == "" {
			bad(KeySlurmRestdToken, "", "required with slurm.restd.url")
		}
	}
	if c.API.UserHeader == "" {
		bad(KeyAPIUserHeader, "", "a header name is required")
	}
	return errors.Join(errs...)
}
