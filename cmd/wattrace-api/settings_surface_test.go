package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cli/clitest"
)

// wattrace-api's settings surface, held whole: every flag in the order
// `wattrace-api --help` lists them, with its type, default, help and
// environment variable (what docs/units-server.md shows), and the exact
// error of each bad value. The settings' declarations may move between
// packages; none of this may change unless the golden files change with
// it.

var update = flag.Bool("update", false, "rewrite testdata/settings/*.golden from this run")

// surfaceFlags renders every flag as `wattrace-api --help` shows it
// (pflag's usage line: name, type, help, default), one block per flag in
// the order of --help, with the environment variable and whether the
// file and the environment may set it.
func surfaceFlags() string {
	return clitest.SurfaceFlags(NewFlagSet("wattrace-api"), EnvVar)
}

// badSettings are the bad values whose errors the surface holds: every
// check of every setting, a decoding error of every kind, and the file's
// own errors. A case is flag arguments, "WATTRACE_API_…=value" entries,
// or a file body (after "file:"). $DIR is a directory of the case's own,
// $DSN a file in it holding a PostgreSQL connection string; both read
// back as $DIR in the errors. Every case but the first has tsdb.url.
var badSettings = [][]string{
	// The one setting without a default.
	{},
	// Decoding, one of each kind.
	{"WATTRACE_API_UPDATER_INTERVAL=five"},
	{"file:store.retention: 5\n"},
	{"WATTRACE_API_STORE_BACKUP_KEEP=ten"},
	{"WATTRACE_API_API_MUNGE_ENABLED=maybe"},
	{"--api.trusted-proxies=10.0.0.0/33"},
	{"file:api.trusted-proxies: [10.0.0.1, nope]\n"},
	// The file and the command line.
	{"file:store.pth: /tmp/x\nupdater: {intervall: 1m}\n"},
	{"file:store.path: /a\nstore:\n  path: /b\n"},
	{"--config.file=/nonexistent/wattrace.yml"},
	{"serve"},
	// web.*, log.*, cluster
	{"--web.listen-address="},
	{"--web.listen-address=9842"},
	{"file:web.listen-address: 9842\n"},
	{"--log.level=loud"},
	{"--log.format=text"},
	{"--cluster="},
	// store.*
	{"--store.driver=mysql"},
	{"--store.path="},
	{"--store.driver=postgres"},
	{"--store.driver=postgres", "--store.dsn-file=/nonexistent/dsn"},
	{"--store.driver=postgres", "--store.dsn-file=/dev/null"},
	{"--store.driver=postgres", "--store.dsn-file=$DSN", "--store.backup.dir=$DIR"},
	{"--store.backup.dir=/nonexistent/backups"},
	{"--store.backup.dir=$DIR", "--store.backup.interval=30s", "--store.backup.keep=0"},
	{"--store.retention=-1s"},
	// tsdb.*
	{"--tsdb.url=ftp://x"},
	{"--tsdb.url=tsdb:9090"},
	{"--tsdb.timeout=0s"},
	// updater.*
	{"--updater.interval=0s"},
	{"--updater.delay=-1s"},
	{"--updater.max-window=0s"},
	{"--updater.lookback=-1h"},
	{"--updater.series-retention=0s"},
	{"--updater.kinds=job,jobs"},
	// slurm.*
	{"--slurm.source=pbs"},
	{"--slurm.interval=10s"},
	{"--slurm.interval=0s"},
	{"--slurm.lookback=0s"},
	{"--slurm.source=restd"},
	{"--slurm.restd.url=http://r:6820"},
	{"--slurm.restd.url=ftp://r", "--slurm.restd.user=u", "--slurm.restd.token-file=/t"},
	{"--slurm.restd.version=v0.0.37"},
	{"--slurm.restd.version="},
	// pbs.*
	{"--pbs.source=auto"},
	{"--pbs.interval=30s"},
	{"--pbs.interval=-1s"},
	{"--pbs.lookback=0s"},
	// api.*
	{"--api.user-header="},
	{"--api.max-range=0s"},
	{"--api.munge.enabled"},
	{"--api.munge.enabled", "--api.munge.audiences=https://api:9842", "--api.munge.unmunge=", "--api.munge.max-ttl=0s"},
	// web.*-timeout
	{"--web.read-header-timeout=0"},
	{"--web.read-timeout=-1s"},
	{"--web.write-timeout=0s"},
	{"--web.idle-timeout=0s"},
	{"--web.read-header-timeout=1m"},
	// guard.*, checked only while the guard is on
	{"--guard.upstream=http://user:secret@tsdb:9090"},
	{"--guard.upstream=tsdb:9090/x?y=1"},
	{"--guard.upstream=http://tsdb:9090", "--guard.families=wattrace_job_.*=user:everyone"},
	{"--guard.upstream=http://tsdb:9090", "--guard.public=wattrace_(node"},
	{"--guard.upstream=http://tsdb:9090", "--guard.cluster-label=a-b"},
	{"--guard.upstream=http://tsdb:9090", "--guard.max-query-length=0"},
	{"--guard.upstream=http://tsdb:9090", "--guard.timeout=0s", "--guard.scopes-ttl=-1s"},
	{"--guard.max-query-length=0", "--guard.timeout=0s", "--guard.families=x"},
	// A problem in every block at once, in one error.
	{"--web.listen-address=9842", "--log.level=x", "--cluster=", "--store.driver=mysql", "--tsdb.timeout=0s",
		"--updater.kinds=jobs", "--slurm.source=pbs", "--pbs.source=x", "--api.user-header=", "--api.munge.enabled",
		"--web.idle-timeout=0s", "--guard.upstream=http://g:9090", "--guard.timeout=0s"},
}

// loadCase loads one case of badSettings (or of a good value), with
// tsdb.url from a flag unless withTSDB is false, and returns its
// configuration, the case's directory and its error.
func loadCase(t *testing.T, c []string, withTSDB bool) (*Config, string, error) {
	t.Helper()
	dir := t.TempDir()
	dsn := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsn, []byte("postgres://u@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var args []string
	if withTSDB {
		args = append(args, "--tsdb.url=http://tsdb:9090")
	}
	fill := strings.NewReplacer("$DSN", dsn, "$DIR", dir).Replace
	var filled []string
	for _, a := range c {
		filled = append(filled, fill(a))
	}
	cfg, err := Load(append(args, clitest.Args(t, filled, EnvPrefix, filepath.Join(dir, "wattrace.yml"))...))
	return cfg, dir, err
}

// surfaceErrors renders each bad case and its error, the case's
// directory made stable.
func surfaceErrors(t *testing.T) string {
	return clitest.SurfaceErrors(t, badSettings, func(t *testing.T, i int, c []string) (func(string) string, error) {
		_, dir, err := loadCase(t, c, i > 0)
		return func(msg string) string { return strings.ReplaceAll(msg, dir, "$DIR") }, err
	})
}

// TestSettingsSurface holds every key's flag, type, default, help and
// environment variable, in the order of --help, and every bad value's
// error, to the golden files (go test -run TestSettingsSurface -update
// rewrites them).
func TestSettingsSurface(t *testing.T) {
	clitest.Golden(t, *update, "testdata/settings/flags.golden", surfaceFlags())
	clitest.Golden(t, *update, "testdata/settings/errors.golden", surfaceErrors(t))
}

// goodValues gives each setting a valid value other than its default
// where the type alone does not suggest one. "$DIR" is a directory.
var goodValues = map[string]string{
	"web.listen-address":      ":9999",
	"log.level":               "debug",
	"log.format":              "json",
	"store.driver":            "postgres",
	"store.backup.dir":        "$DIR",
	"tsdb.url":                "http://other:9090",
	"updater.kinds":           "job,pod",
	"updater.cluster-label":   "cluster",
	"slurm.source":            "sacct",
	"slurm.restd.url":         "http://slurmrestd:6820",
	"slurm.restd.version":     "v0.0.44",
	"pbs.source":              "qstat",
	"api.user-header":         "X-User",
	"api.trusted-proxies":     "10.0.0.0/8,192.168.1.7",
	"api.munge.audiences":     "https://api:9842",
	"web.read-header-timeout": "20s",
	"guard.upstream":          "http://tsdb:9090/prometheus",
	"guard.public":            "wattrace_node_.*",
	"guard.families":          "wattrace_job_.*=uid:user",
	"guard.cluster-label":     "cluster",
	"guard.max-query-length":  "1000",
}

// alsoNeeds are the other settings a good value needs, given as flags
// whichever source the setting under test comes from.
var alsoNeeds = map[string][]string{
	"store.driver":      {"--store.dsn-file=$DSN"},
	"slurm.restd.url":   {"--slurm.restd.user=slurm", "--slurm.restd.token-file=/etc/slurm/jwt"},
	"api.munge.enabled": {"--api.munge.audiences=https://api:9842"},
}

// TestEverySettingFromEachSource: every setting is read from its flag,
// its environment variable and its file key (flat and nested), each
// giving the same configuration, which differs from the defaults.
func TestEverySettingFromEachSource(t *testing.T) {
	// One directory for every case, so that $DIR reads the same in each.
	dir := t.TempDir()
	dsn := filepath.Join(dir, "dsn")
	if err := os.WriteFile(dsn, []byte("postgres://u@h/db\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("$DSN", dsn, "$DIR", dir).Replace
	clitest.EverySettingFromEachSource(t, clitest.Sources[Config]{
		Flags:  NewFlagSet("wattrace-api"),
		EnvVar: EnvVar,
		Value:  func(f *pflag.Flag) string { return fill(clitest.GoodValue(f, goodValues)) },
		Needs: func(key string) []string {
			var needs []string
			for _, n := range alsoNeeds[key] {
				needs = append(needs, fill(n))
			}
			return needs
		},
		// tsdb.url is required: every case has it, but from a flag it
		// would hide the source under test.
		Load: func(t *testing.T, key string, c []string) (*Config, error) {
			cfg, _, err := loadCase(t, c, key != "tsdb.url")
			return cfg, err
		},
		Unfile: func(c *Config) { c.ConfigFile = "" },
	})
}

// Bad configuration stops start-up: main's path (internal/cli.Main with
// the server's program) exits 2 before anything runs, the error on
// stderr naming the key, whether the value came from a flag, the
// environment or the file; --version needs no other setting.
func TestBadConfigurationStopsStartUp(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		code int
		want string
	}{
		{nil, 2, `wattrace-api: invalid value "" for tsdb.url: the TSDB's query API URL is required`},
		{[]string{"--tsdb.url=http://x:1", "--slurm.interval=10s"}, 2, `wattrace-api: invalid value "10s" for slurm.interval: at least 1m`},
		{[]string{"--tsdb.url=http://x:1", "WATTRACE_API_STORE_DRIVER=mysql"}, 2, `wattrace-api: invalid value "mysql" for store.driver`},
		{[]string{"WATTRACE_API_TSDB_URL=http://x:1", "file:guard:\n  upstream: http://g:1\n  timeout: 0s\n"}, 2, `wattrace-api: invalid value "0s" for guard.timeout: must be positive`},
		{[]string{"--tsdb.url=http://x:1", "file:api:\n  munge.enabled: true\n"}, 2, `wattrace-api: invalid value "" for api.munge.audiences: required with api.munge.enabled`},
		{[]string{"--version"}, 0, "wattrace-api, version"},
	} {
		t.Run(strings.Join(tt.in, " "), func(t *testing.T) {
			args := clitest.Args(t, tt.in, EnvPrefix, filepath.Join(t.TempDir(), "api.yml"))
			code, ran, stdout, stderr := clitest.StopsStartUp(program, args)
			if code != tt.code || ran || !strings.Contains(stdout+stderr, tt.want) {
				t.Errorf("exit %d, ran %v, stdout %q, stderr %q, want %d and %q", code, ran, stdout, stderr, tt.code, tt.want)
			}
		})
	}
}
