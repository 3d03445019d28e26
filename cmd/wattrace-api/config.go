package main

import (
	"sync"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/units/pbs"
	"github.com/wattrace/wattrace/internal/units/slurm"
	"github.com/wattrace/wattrace/internal/units/store"
	"github.com/wattrace/wattrace/internal/units/updater"
)

// The server's configuration is read as the exporter's is (internal/cli):
// from lowest to highest precedence, built-in defaults, a YAML file
// (--config.file), environment variables (WATTRACE_API_ prefix) and
// flags. Every setting has one key: the flag name without the leading
// dashes ("store.path"), the same key in the file and, upper-cased with
// dots and dashes as underscores, the environment variable
// (WATTRACE_API_STORE_PATH).
//
// Each setting is declared beside the code that reads it, with
// internal/setting, in a block that is that code's own type
// (store.Settings, updater.Config, slurm.Settings, the guard's Guard, …):
// key, default, help, check. Config holds one of each block, and the
// value lands where its user reads it.

// EnvPrefix is prepended (with an underscore) to every environment
// variable: WATTRACE_API_STORE_PATH sets store.path. Its own prefix keeps
// the exporter's WATTRACE_WEB_LISTEN_ADDRESS from reaching this server on
// a host that runs both.
const EnvPrefix = "WATTRACE_API"

// loader reads the server's settings as the exporter's are read
// (internal/cli), under its own prefix.
var loader = cli.Loader{Prefix: EnvPrefix, NotSettings: map[string]bool{cli.KeyVersion: true}}

// KeyCluster names the units of this site: the updater's, Slurm's, PBS's
// and the guard's.
const KeyCluster = "cluster"

// Config is the API server's configuration.
type Config struct {
	// ConfigFile is the YAML file the configuration was read from, "" if
	// none.
	ConfigFile string
	// ShowVersion is set by --version; it is not a setting.
	ShowVersion bool

	Web Web     // web.listen-address, web.config.file (webconfig.go)
	Log cli.Log // log.* (internal/cli, the exporter's too)
	// Cluster names the units of this site (the updater's, Slurm's,
	// PBS's, the guard's).
	Cluster string
	Store   store.Settings // store.* (internal/units/store)
	TSDB    TSDB           // tsdb.* (tsdb.go)
	// Updater is updater.*; its Cluster is cluster.
	Updater updater.Config
	Slurm   slurm.Settings // slurm.* (internal/units/slurm)
	PBS     pbs.Settings   // pbs.* (internal/units/pbs)
	API     API            // api.*: access control (handler.go)
	// Identity is api.proxies and api.munge.* (handler.go).
	Identity Identity
	// Timeouts are web.*-timeout (run.go).
	Timeouts Timeouts
	// Guard is the query guard under /tsdb (guard.go).
	Guard Guard
}

// settings declares every setting bound to c, block by block, in the
// order of --help and of the checks.
func (c *Config) settings() *setting.Set {
	s := &setting.Set{}
	for _, b := range []setting.Declarer{
		&c.Web, &c.Log, setting.DeclarerFunc(c.declareCluster),
		&c.Store, &c.TSDB, &c.Updater, &c.Slurm, &c.PBS, &c.API, &c.Identity, &c.Timeouts, &c.Guard,
	} {
		b.Declare(s)
	}
	return s
}

// declareCluster declares cluster, which every part names its units with.
func (c *Config) declareCluster(s *setting.Set) {
	s.String(&c.Cluster, KeyCluster, "default", "Name of the cluster the units belong to (Slurm's ClusterName for a Slurm site).").Checked(func() error {
		if c.Cluster == "" {
			return setting.Invalid(KeyCluster, "", "a cluster name is required")
		}
		return nil
	})
}

// declared is every setting, bound to nothing the loader keeps: what the
// flags are built from.
var declared = sync.OnceValue(func() *setting.Set { return (&Config{}).settings() })

// NewFlagSet returns the server's flags with their defaults.
func NewFlagSet(name string) *pflag.FlagSet {
	return cli.NewFlagSet(name, "store.path: /var/lib/wattrace/units.db", declared())
}

// EnvVar returns the environment variable that sets key.
func EnvVar(key string) string { return loader.EnvVar(key) }

// Load parses args and merges them with the environment, the file and the
// defaults (flags over environment over file over defaults), then checks
// the result; each error names its key. With --version nothing is checked
// (tsdb.url, say, is required only to run).
func Load(args []string) (*Config, error) {
	fs := NewFlagSet("wattrace-api")
	d, file, err := loader.Load(fs, args)
	if err != nil {
		return nil, err
	}
	c := &Config{ConfigFile: file}
	c.ShowVersion, _ = fs.GetBool(cli.KeyVersion)
	s := c.settings()
	d.Decode(s)
	if err := d.Err(); err != nil {
		return nil, err
	}
	c.Updater.Cluster = c.Cluster
	if c.ShowVersion {
		return c, nil
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return c, nil
}
