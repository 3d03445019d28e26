package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/pkg/units"
)

func must(t *testing.T, args ...string) *Config {
	t.Helper()
	c, err := Load(args)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestConfigSources: the same key from a flag, the environment and the
// file, with flags over environment over file over defaults.
func TestConfigSources(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "api.yml")
	os.WriteFile(file, []byte(`
tsdb.url: http://file:9090
store:
  path: `+filepath.Join(dir, "file.db")+`
updater:
  interval: 2m
  kinds: [job, pod]
api.admins: [root, carol]
api.trusted-proxies: [10.0.0.0/8, 192.168.1.7]
`), 0o644)
	c := must(t, "--config.file", file)
	if c.TSDB.URL != "http://file:9090" || c.Store.Path != filepath.Join(dir, "file.db") || c.Updater.Interval != 2*time.Minute ||
		len(c.Updater.Kinds) != 2 || c.Updater.Kinds[1] != units.KindPod || len(c.API.Admins) != 2 || len(c.API.TrustedProxies) != 2 ||
		c.API.TrustedProxies[1].String() != "192.168.1.7/32" {
		t.Errorf("from the file: %+v", c)
	}
	// Defaults.
	if c.Store.Driver != "sqlite" || c.Slurm.Interval != 15*time.Minute || c.API.UserHeader != "X-Grafana-User" ||
		c.Web.ListenAddresses[0] != ":9842" || c.Log.Format != "logfmt" || c.Cluster != "default" {
		t.Errorf("defaults: %+v", c)
	}
	t.Setenv("WATTRACE_API_UPDATER_INTERVAL", "3m")
	t.Setenv("WATTRACE_API_API_ADMINS", "alice,bob")
	t.Setenv("WATTRACE_API_TSDB_URL", "http://env:8428")
	c = must(t, "--config.file", file)
	if c.Updater.Interval != 3*time.Minute || strings.Join(c.API.Admins, ",") != "alice,bob" || c.TSDB.URL != "http://env:8428" {
		t.Errorf("environment over file: %+v %v", c.Updater, c.API.Admins)
	}
	c = must(t, "--config.file", file, "--updater.interval=4m", "--tsdb.url=http://flag:9090")
	if c.Updater.Interval != 4*time.Minute || c.TSDB.URL != "http://flag:9090" {
		t.Errorf("flag over environment: %v %v", c.Updater.Interval, c.TSDB.URL)
	}
}

// TestConfigErrorsNameTheKey: each bad setting stops start-up with an
// error that names its key.
func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	dsn := filepath.Join(dir, "dsn")
	os.WriteFile(dsn, []byte("postgres://u@h/db\n"), 0o600)
	ok := []string{"--tsdb.url=http://tsdb:9090"}
	for _, c := range []struct {
		args []string
		key  string
	}{
		{nil, "tsdb.url"},
		{[]string{"--tsdb.url=ftp://x"}, "tsdb.url"},
		{append(ok, "--store.driver=mysql"), "store.driver"},
		{append(ok, "--store.path="), "store.path"},
		{append(ok, "--store.driver=postgres"), "store.dsn-file"},
		{append(ok, "--store.driver=postgres", "--store.dsn-file="+filepath.Join(dir, "missing")), "store.dsn-file"},
		{append(ok, "--store.driver=postgres", "--store.dsn-file="+dsn, "--store.backup.dir="+dir), "store.backup.dir"},
		{append(ok, "--store.backup.dir="+filepath.Join(dir, "nope")), "store.backup.dir"},
		{append(ok, "--updater.interval=0s"), "updater.interval"},
		{append(ok, "--updater.kinds=jobs"), "updater.kinds"},
		{append(ok, "--slurm.interval=10s"), "slurm.interval"},
		{append(ok, "--slurm.source=restd"), "slurm.restd.url"},
		{append(ok, "--slurm.restd.url=http://r:6820"), "slurm.restd.user"},
		{append(ok, "--slurm.source=pbs"), "slurm.source"},
		{append(ok, "--slurm.restd.version=v0.0.37"), "slurm.restd.version"},
		{append(ok, "--slurm.restd.version="), "slurm.restd.version"},
		{append(ok, "--api.trusted-proxies=10.0.0.0/33"), "api.trusted-proxies"},
		{append(ok, "--api.max-range=0s"), "api.max-range"},
		{append(ok, "--api.user-header="), "api.user-header"},
		{append(ok, "--web.listen-address=9842"), "web.listen-address"},
		{append(ok, "--log.level=loud"), "log.level"},
		{append(ok, "--cluster="), "cluster"},
	} {
		_, err := Load(c.args)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("%v: %v, want an error naming %s", c.args, err, c.key)
		}
	}
	file := filepath.Join(dir, "bad.yml")
	os.WriteFile(file, []byte("tsdb.url: http://x:1\nstore.pth: /tmp/x\n"), 0o644)
	if _, err := Load([]string{"--config.file", file}); err == nil || !strings.Contains(err.Error(), "store.pth") {
		t.Errorf("unknown file key: %v", err)
	}
	c := must(t, append(ok, "--store.driver=postgres", "--store.dsn-file="+dsn)...)
	if c.Store.DSN != "postgres://u@h/db" {
		t.Errorf("DSN %q", c.Store.DSN)
	}
	t.Setenv("WATTRACE_API_UPDATER_DELAY", "5")
	if _, err := Load(ok); err == nil || !strings.Contains(err.Error(), "updater.delay") {
		t.Errorf("a bare number as a duration: %v", err)
	}
}

// TestEveryFlagHasEnv keeps the flag → environment mapping one-to-one.
func TestEveryFlagHasEnv(t *testing.T) {
	seen := map[string]string{}
	NewFlagSet("x").VisitAll(func(f *pflag.Flag) {
		env := EnvVar(f.Name)
		if other, dup := seen[env]; dup {
			t.Errorf("%s and %s share %s", f.Name, other, env)
		}
		seen[env] = f.Name
		if f.Usage == "" {
			t.Errorf("%s has no help", f.Name)
		}
	})
	if EnvVar(store.KeyBackupInterval) != "WATTRACE_API_STORE_BACKUP_INTERVAL" {
		t.Error(EnvVar(store.KeyBackupInterval))
	}
}
