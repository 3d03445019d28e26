package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/units/slurm"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

// EnvPrefix is prepended (with an underscore) to every environment
// variable: WATTRACE_API_STORE_PATH sets store.path. Its own prefix keeps
// the exporter's WATTRACE_WEB_LISTEN_ADDRESS from reaching this server on
// a host that runs both.
const EnvPrefix = "WATTRACE_API"

// loader reads the server's settings as the exporter's are read
// (internal/cli), under its own prefix.
var loader = cli.Loader{Prefix: EnvPrefix, NotSettings: map[string]bool{"version": true}}

// Keys: flag names, YAML keys and (upper-cased) environment variables.
const (
	KeyConfigFile = cli.KeyConfigFile

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
	KeySlurmRestdVer   = "slurm.restd.version"

	KeyPBSSource   = "pbs.source"
	KeyPBSInterval = "pbs.interval"
	KeyPBSLookback = "pbs.lookback"
	KeyPBSQstat    = "pbs.qstat.path"

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
	PBS     PBS
	API     API
	// Identity and Timeouts are the identity and hardening block.
	Identity Identity
	Timeouts Timeouts
	// Guard is the query guard under /tsdb (guard.go).
	Guard Guard
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

// Updater tunes the TSDB update cycle (internal/units/updater.Config).
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
	// RestdVersion: auto (probe slurmrestd's data_parser versions, newest
	// first) or one of slurm.RestdVersions.
	RestdVersion string
}

// PBS says where PBS Professional and OpenPBS job metadata comes from.
type PBS struct {
	// Source: qstat or none. Not auto: Slurm's Torque wrappers install a
	// qstat of their own, which a Slurm site must not be read through.
	Source    string
	Interval  time.Duration
	Lookback  time.Duration
	QstatPath string
}

// API is the access control of the HTTP API (internal/units/api).
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
	// (internal/units/api.LoadTokens).
	TokensFile string
}

// Allowed values.
var (
	LogLevels    = cli.LogLevels
	LogFormats   = cli.LogFormats
	SlurmSources = []string{"auto", "restd", "sacct", "none"}
	PBSSources   = []string{"none", "qstat"}
)

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
	fs.StringSlice(KeyUpdaterKinds, nil, "Workload levels read: job, pod, vm, container, unit, pbs_job. Empty: all.")
	fs.Duration(KeyUpdaterSeriesKeep, 24*time.Hour, "How long an ended unit's series state is kept, so series that return (an exporter that was unreachable) are not counted twice.")

	fs.String(KeySlurmSource, "auto", "Slurm job metadata: auto (restd when slurm.restd.url is set, else sacct when found), restd, sacct or none.")
	fs.Duration(KeySlurmInterval, 15*time.Minute, "Time between reads of Slurm's accounting.")
	fs.Duration(KeySlurmLookback, 24*time.Hour, "How far back the first read goes.")
	fs.String(KeySlurmSacct, "sacct", "The sacct command.")
	fs.String(KeySlurmRestdURL, "", "slurmrestd base URL, e.g. http://slurmrestd:6820 (its accounting API, /slurmdb/<version>/jobs).")
	fs.String(KeySlurmRestdUser, "", "User name sent to slurmrestd (X-SLURM-USER-NAME); must be a Slurm operator to list every job.")
	fs.String(KeySlurmRestdToken, "", "File holding slurmrestd's JWT (X-SLURM-USER-TOKEN), re-read before each request.")
	fs.String(KeySlurmRestdVer, "auto", "slurmrestd data_parser version: auto (the newest it serves of v0.0.45 to v0.0.38: 26.05 serves v0.0.45, 22.05 v0.0.38) or a fixed one, e.g. v0.0.45.")
	fs.String(KeyPBSSource, "none", "PBS Professional / OpenPBS job metadata: none or qstat (qstat -x -f -F json).")
	fs.Duration(KeyPBSInterval, 15*time.Minute, "Time between reads of PBS's job history.")
	fs.Duration(KeyPBSLookback, 24*time.Hour, "How far back the first PBS read goes.")
	fs.String(KeyPBSQstat, "qstat", "The qstat command of PBS.")

	fs.String(KeyAPIUserHeader, "X-Grafana-User", "Header a trusted proxy (Grafana) sets to the requesting user.")
	fs.StringSlice(KeyAPITrustedProxies, nil, "Networks (CIDR or address) whose requests are a proxy without any credential, their user header believed: weaker than api.proxies, since anyone who can send from them is the proxy. Repeatable.")
	fs.StringSlice(KeyAPIAdmins, nil, "Users who see every unit. Repeatable.")
	fs.Duration(KeyAPIMaxRange, 366*24*time.Hour, "Longest time range one query may ask for.")
	fs.String(KeyAPITokensFile, "", "YAML file mapping users to the hex SHA-256 of their bearer tokens (wattrace acct --token). Empty: no tokens.")
	addIdentityFlags(fs)

	guardFlags(fs)
	return fs
}

// EnvVar returns the environment variable that sets key.
func EnvVar(key string) string { return loader.EnvVar(key) }

// Load parses args and merges them with the environment, the file and the
// defaults (flags over environment over file over defaults), then
// validates the result.
func Load(args []string) (*Config, error) {
	fs := NewFlagSet("wattrace-api")
	d, cfgFile, err := loader.Load(fs, args)
	if err != nil {
		return nil, err
	}
	c, err := decode(d)
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

// networks reads CIDRs or single addresses.
func networks(d *cli.Decoder, key string) []*net.IPNet {
	var out []*net.IPNet
	for _, s := range d.Strings(key) {
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
			d.Fail(key, s, "want a CIDR such as 10.0.0.0/8 or an address")
			continue
		}
		out = append(out, n)
	}
	return out
}

func decode(d *cli.Decoder) (*Config, error) {
	c := &Config{
		Web:     Web{ListenAddresses: d.Strings(KeyWebListenAddress), ConfigFile: d.String(KeyWebConfigFile)},
		Log:     Log{Level: d.String(KeyLogLevel), Format: d.String(KeyLogFormat)},
		Cluster: d.String(KeyCluster),
		Store: Store{
			Driver: d.String(KeyStoreDriver), Path: d.String(KeyStorePath), DSNFile: d.String(KeyStoreDSNFile),
			Retention: d.Duration(KeyStoreRetention), BackupDir: d.String(KeyStoreBackupDir),
			BackupInterval: d.Duration(KeyStoreBackupInterval), BackupKeep: d.Int(KeyStoreBackupKeep),
		},
		TSDB: TSDB{URL: d.String(KeyTSDBURL), HTTPConfigFile: d.String(KeyTSDBHTTPConfig), Timeout: d.Duration(KeyTSDBTimeout)},
		Updater: Updater{
			Interval: d.Duration(KeyUpdaterInterval), Delay: d.Duration(KeyUpdaterDelay),
			MaxWindow: d.Duration(KeyUpdaterMaxWindow), Lookback: d.Duration(KeyUpdaterLookback),
			SeriesRetention: d.Duration(KeyUpdaterSeriesKeep),
			Selector:        d.String(KeyUpdaterSelector), ClusterLabel: d.String(KeyUpdaterClusterLabel),
		},
		Slurm: Slurm{
			Source: d.String(KeySlurmSource), Interval: d.Duration(KeySlurmInterval), Lookback: d.Duration(KeySlurmLookback),
			SacctPath: d.String(KeySlurmSacct), RestdURL: d.String(KeySlurmRestdURL),
			RestdUser: d.String(KeySlurmRestdUser), RestdTokenFile: d.String(KeySlurmRestdToken),
			RestdVersion: d.String(KeySlurmRestdVer),
		},
		PBS: PBS{
			Source: d.String(KeyPBSSource), Interval: d.Duration(KeyPBSInterval), Lookback: d.Duration(KeyPBSLookback),
			QstatPath: d.String(KeyPBSQstat),
		},
		API: API{
			UserHeader: d.String(KeyAPIUserHeader), TrustedProxies: networks(d, KeyAPITrustedProxies),
			Admins: d.Strings(KeyAPIAdmins), MaxRange: d.Duration(KeyAPIMaxRange),
			TokensFile: d.String(KeyAPITokensFile),
		},
	}
	decodeIdentity(d, c)
	c.Guard = decodeGuard(d)
	for _, k := range d.Strings(KeyUpdaterKinds) {
		c.Updater.Kinds = append(c.Updater.Kinds, units.Kind(k))
	}
	if err := d.Err(); err != nil {
		return nil, err
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
		if !slices.Contains(allowed, val) {
			bad(key, val, "allowed: "+strings.Join(allowed, ", "))
		}
	}
	oneOf(KeyLogLevel, c.Log.Level, LogLevels)
	oneOf(KeyLogFormat, c.Log.Format, LogFormats)
	oneOf(KeySlurmSource, c.Slurm.Source, SlurmSources)
	oneOf(KeyPBSSource, c.PBS.Source, PBSSources)
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
	c.validateStore(bad)
	if c.TSDB.URL == "" {
		bad(KeyTSDBURL, "", "the TSDB's query API URL is required")
	} else if !httpURL(c.TSDB.URL) {
		bad(KeyTSDBURL, c.TSDB.URL, "want an http(s) URL")
	}
	if c.TSDB.Timeout <= 0 {
		bad(KeyTSDBTimeout, c.TSDB.Timeout, "must be positive")
	}
	c.validateSchedule(bad)
	c.validateSlurm(bad)
	if c.API.UserHeader == "" {
		bad(KeyAPIUserHeader, "", "a header name is required")
	}
	c.validateIdentity(bad)

	c.Guard.validate(bad)
	return errors.Join(errs...)
}

// httpURL reports whether s is an absolute http or https URL with a host.
func httpURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// validateStore checks the store's keys; it reads the PostgreSQL DSN file
// into Store.DSN.
func (c *Config) validateStore(bad func(key string, val any, why string)) {
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
}

// validateSchedule checks the updater's and the feeders' intervals and
// windows, and the kinds the updater counts.
func (c *Config) validateSchedule(bad func(key string, val any, why string)) {
	positive := map[string]time.Duration{
		KeyUpdaterInterval: c.Updater.Interval, KeyUpdaterMaxWindow: c.Updater.MaxWindow,
		KeyUpdaterLookback: c.Updater.Lookback, KeyUpdaterSeriesKeep: c.Updater.SeriesRetention,
		KeySlurmInterval: c.Slurm.Interval, KeySlurmLookback: c.Slurm.Lookback, KeyAPIMaxRange: c.API.MaxRange,
		KeyPBSInterval: c.PBS.Interval, KeyPBSLookback: c.PBS.Lookback,
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
	if c.PBS.Interval > 0 && c.PBS.Interval < time.Minute {
		bad(KeyPBSInterval, c.PBS.Interval, "at least 1m: qstat -x lists the server's whole job history")
	}
	for _, k := range c.Updater.Kinds {
		if !k.Valid() {
			bad(KeyUpdaterKinds, k, "allowed: job, pod, vm, container, unit, pbs_job")
		}
	}
}

// validateSlurm checks how slurmrestd is reached.
func (c *Config) validateSlurm(bad func(key string, val any, why string)) {
	if c.Slurm.Source == "restd" && c.Slurm.RestdURL == "" {
		bad(KeySlurmRestdURL, "", "required with slurm.source restd")
	}
	if !slurm.ValidRestdVersion(c.Slurm.RestdVersion) {
		bad(KeySlurmRestdVer, c.Slurm.RestdVersion, "want auto or one of "+strings.Join(slurm.RestdVersions, ", "))
	}
	if c.Slurm.RestdURL != "" {
		if !httpURL(c.Slurm.RestdURL) {
			bad(KeySlurmRestdURL, c.Slurm.RestdURL, "want an http(s) URL")
		}
		if c.Slurm.RestdUser == "" {
			bad(KeySlurmRestdUser, "", "required with slurm.restd.url")
		}
		if c.Slurm.RestdTokenFile == "" {
			bad(KeySlurmRestdToken, "", "required with slurm.restd.url")
		}
	}
}

// Identity and HTTP server hardening: who may name a user, MUNGE, and the
// server's timeouts. Kept apart from the keys above so each part of the
// configuration reads as one block.
const (
	KeyAPIProxies        = "api.proxies"
	KeyAPIMungeEnabled   = "api.munge.enabled"
	KeyAPIMungeAudiences = "api.munge.audiences"
	KeyAPIMungeUnmunge   = "api.munge.unmunge"
	KeyAPIMungeSocket    = "api.munge.socket"
	KeyAPIMungeMaxTTL    = "api.munge.max-ttl"

	KeyWebReadHeaderTimeout = "web.read-header-timeout"
	KeyWebReadTimeout       = "web.read-timeout"
	KeyWebWriteTimeout      = "web.write-timeout"
	KeyWebIdleTimeout       = "web.idle-timeout"
)

// Identity is who may authenticate how (internal/units/access).
type Identity struct {
	// Proxies are the principals (basic-auth users of the web config,
	// client certificate CNs) that may name the user in the user header.
	Proxies []string
	// Munge enables `Authorization: MUNGE` credentials (wattrace acct).
	Munge MungeSettings
}

// MungeSettings configures MUNGE credentials.
type MungeSettings struct {
	Enabled bool
	// Audiences are the URLs clients reach this server under; a
	// credential made for another URL is refused.
	Audiences []string
	// Unmunge is the unmunge command.
	Unmunge string
	// Socket is munged's socket, given to unmunge (its default when
	// empty).
	Socket string
	// MaxTTL is the longest-lived credential accepted.
	MaxTTL time.Duration
}

// Timeouts bound every HTTP connection, so an idle or half-sent request
// cannot hold a connection (and a goroutine) open.
type Timeouts struct {
	ReadHeader, Read, Write, Idle time.Duration
}

// addIdentityFlags declares the block's flags.
func addIdentityFlags(fs *pflag.FlagSet) {
	fs.StringSlice(KeyAPIProxies, nil, "Principals (basic-auth users of web.config.file, client certificate CNs) that may name the user in api.user-header, e.g. grafana. Repeatable.")
	fs.Bool(KeyAPIMungeEnabled, false, "Accept MUNGE credentials (Authorization: MUNGE …, sent by wattrace acct); needs munged and unmunge on this host.")
	fs.StringSlice(KeyAPIMungeAudiences, nil, "URLs clients reach this server under (https://host:port); a MUNGE credential made for another is refused. Required with api.munge.enabled.")
	fs.String(KeyAPIMungeUnmunge, "unmunge", "The unmunge command.")
	fs.String(KeyAPIMungeSocket, "", "munged's socket, passed to unmunge as --socket (default: munge's own, /run/munge/munge.socket.2).")
	fs.Duration(KeyAPIMungeMaxTTL, 5*time.Minute, "Longest time-to-live, and age, of a MUNGE credential accepted.")
	fs.Duration(KeyWebReadHeaderTimeout, 10*time.Second, "Time to read a request's headers.")
	fs.Duration(KeyWebReadTimeout, 30*time.Second, "Time to read a whole request.")
	fs.Duration(KeyWebWriteTimeout, 5*time.Minute, "Time to write an answer (a year of units is large).")
	fs.Duration(KeyWebIdleTimeout, 60*time.Second, "Time an idle keep-alive connection, or one with part of its next request, stays open.")
}

func decodeIdentity(d *cli.Decoder, c *Config) {
	c.Identity = Identity{
		Proxies: d.Strings(KeyAPIProxies),
		Munge: MungeSettings{
			Enabled: d.Bool(KeyAPIMungeEnabled), Audiences: d.Strings(KeyAPIMungeAudiences),
			Unmunge: d.String(KeyAPIMungeUnmunge), Socket: d.String(KeyAPIMungeSocket), MaxTTL: d.Duration(KeyAPIMungeMaxTTL),
		},
	}
	c.Timeouts = Timeouts{
		ReadHeader: d.Duration(KeyWebReadHeaderTimeout), Read: d.Duration(KeyWebReadTimeout),
		Write: d.Duration(KeyWebWriteTimeout), Idle: d.Duration(KeyWebIdleTimeout),
	}
}

// validateIdentity reports the block's bad values, each naming its key.
func (c *Config) validateIdentity(bad func(key string, val any, why string)) {
	for k, v := range map[string]time.Duration{
		KeyWebReadHeaderTimeout: c.Timeouts.ReadHeader, KeyWebReadTimeout: c.Timeouts.Read,
		KeyWebWriteTimeout: c.Timeouts.Write, KeyWebIdleTimeout: c.Timeouts.Idle,
	} {
		if v <= 0 {
			bad(k, v, "must be positive: without it a client can hold a connection open forever")
		}
	}
	if c.Timeouts.ReadHeader > c.Timeouts.Read && c.Timeouts.Read > 0 {
		bad(KeyWebReadHeaderTimeout, c.Timeouts.ReadHeader, "at most web.read-timeout")
	}
	for _, p := range c.Identity.Proxies {
		if strings.TrimSpace(p) == "" {
			bad(KeyAPIProxies, p, "a principal name")
		}
	}
	m := c.Identity.Munge
	if m.Enabled {
		if len(m.Audiences) == 0 {
			bad(KeyAPIMungeAudiences, "", "required with api.munge.enabled: the URLs clients reach this server under")
		}
		if m.Unmunge == "" {
			bad(KeyAPIMungeUnmunge, "", "required with api.munge.enabled")
		}
		if m.MaxTTL <= 0 {
			bad(KeyAPIMungeMaxTTL, m.MaxTTL, "must be positive")
		}
	}
}
