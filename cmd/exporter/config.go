package main

import (
	"sync"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/cgroupstats"
	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
	"github.com/wattrace/wattrace/pkg/workload/kube"
)

// The exporter's configuration comes from, lowest to highest precedence:
// built-in defaults, a YAML file (--config.file), environment variables
// (WATTRACE_ prefix) and command-line flags (internal/cli). Every setting
// has one key: the flag name without the leading dashes
// ("web.listen-address"), the same key in the YAML file and, upper-cased
// with dots and dashes as underscores, the environment variable
// (WATTRACE_WEB_LISTEN_ADDRESS).
//
// Each setting is declared beside the code that reads it, with
// internal/setting, in a block that is that code's own type (stats.Config,
// node.Config, discover.Config, …): key, default, help, check. Config
// holds one of each block, and the value lands where its user reads it,
// with no copy in between.

// EnvPrefix is prepended (with an underscore) to every environment variable.
const EnvPrefix = "WATTRACE"

// Config is the complete, validated configuration.
type Config struct {
	// ConfigFile is the YAML file the configuration was read from, "" if none.
	ConfigFile string
	// ShowVersion is set by --version; it is not a setting and is never read
	// from the file or the environment.
	ShowVersion bool

	Web        webSettings              // web.* (http.go)
	Path       pathSettings             // path.*
	Log        cli.Log                  // log.*
	Accounting compose.AccountingConfig // accounting.mode
	Cgroup     cgroup.Settings          // cgroup.hierarchy
	// Stats is the loop's: stats.*, power.idle-*, power.usage-metric,
	// vm.idle-split.
	Stats stats.Config
	// Power is the meters': power.source, power.ipmi, power.max-watts,
	// power.estimator.*, power.host-share.*, each meter's own.
	Power discover.Config
	// GPU is gpu.*; its roots and sample period follow path.* and
	// power.meter-interval.
	GPU node.Config
	// Collector is collector.<name>, the collectors' own
	// collector.<name>.*, and collector.<level>.
	Collector collector.Selection
	Probes    bpfloader.ProbeSettings // collector.probes.disable, .counters
	Resources cgroupstats.Settings    // collector.resources
	Perf      profiling.Config        // collector.perf.*
	Workload  workload.Options        // workload.libvirt.dirs
	Kube      kube.Config             // workload.kube.*
	Emissions carbon.Settings         // emissions.*
	Guests    guestshare.Config       // guests.share.*
	Runtime   runtimeSettings         // runtime.* (memlimit.go)
}

// pathSettings hold the mount points of the kernel file systems, so that
// the exporter can run in a container with the host's mounted elsewhere.
type pathSettings struct {
	Procfs   string
	Sysfs    string
	Cgroupfs string
	Etc      string
}

// Declare declares path.*, bound to p.
func (p *pathSettings) Declare(s *setting.Set) {
	s.String(&p.Procfs, "path.procfs", "/proc", "procfs mount point.").Checked(nonEmpty("path.procfs", &p.Procfs))
	s.String(&p.Sysfs, "path.sysfs", "/sys", "sysfs mount point.").Checked(nonEmpty("path.sysfs", &p.Sysfs))
	s.String(&p.Cgroupfs, "path.cgroupfs", "/sys/fs/cgroup", "cgroup file system mount point.").Checked(nonEmpty("path.cgroupfs", &p.Cgroupfs))
	s.String(&p.Etc, "path.etc", "/etc", "Host /etc, for user names (passwd).")
}

func nonEmpty(key string, v *string) func() error {
	return func() error {
		if *v == "" {
			return setting.Invalid(key, "", "must not be empty")
		}
		return nil
	}
}

// settings declares every setting bound to c, block by block, in the
// order of --help and of the checks.
func (c *Config) settings() *setting.Set {
	s := &setting.Set{}
	for _, b := range []setting.Declarer{
		&c.Web, &c.Path, &c.Log, &c.Accounting, &c.Cgroup,
		setting.DeclarerFunc(func(s *setting.Set) { c.Stats.Declare(s, power.Zones()) }),
		&c.Power, &c.GPU, &c.Collector, &c.Probes, &c.Resources, &c.Perf,
		&c.Workload, &c.Kube, &c.Emissions, &c.Guests, &c.Runtime,
	} {
		b.Declare(s)
	}
	// The shares are the VMs' workload figures, which exist only while
	// the vm level is on.
	s.Lookup(guestshare.KeySharePath).Checked(func() error {
		if c.Guests.Dir != "" && !c.Collector.LevelOn[ident.KindVM] {
			return setting.Invalid(guestshare.KeySharePath, c.Guests.Dir, collector.Key(string(ident.KindVM))+" is off, so no VM's energy is attributed")
		}
		return nil
	})
	return s
}

// declared is every setting, bound to nothing the loader keeps: what the
// flags and the file's map keys are built from.
var declared = sync.OnceValue(func() *setting.Set { return (&Config{}).settings() })

// loader reads the exporter's settings (internal/cli); every declared map
// (power.idle-watts, power.max-watts, gpu.idle-watts, a meter's or
// collector's own) may be nested in the file.
var loader = cli.Loader{
	Prefix:      EnvPrefix,
	NotSettings: map[string]bool{cli.KeyVersion: true},
	Maps: func(key string) bool {
		st := declared().Lookup(key)
		return st != nil && st.Kind == setting.Map
	},
}

// EnvVar returns the environment variable that sets key.
func EnvVar(key string) string { return loader.EnvVar(key) }

// NewFlagSet returns the exporter's flags with their defaults. Load parses
// it; main prints its usage and tests check that every flag is documented.
func NewFlagSet(name string) *pflag.FlagSet {
	return cli.NewFlagSet(name, "stats.interval: 10s", declared())
}

// Load parses args (without the program name) and merges them with the
// environment, the configuration file and the defaults, then validates the
// result. On --help it returns an error wrapping pflag.ErrHelp after the
// flag set has printed usage.
func Load(args []string) (*Config, error) {
	fs := NewFlagSet("wattrace")
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
	// The GPU sources read the same roots, and amdgpu power is sampled as
	// often as the slow meters are read (power.meter-interval).
	c.GPU.SysfsRoot, c.GPU.ProcfsRoot = c.Path.Sysfs, c.Path.Procfs
	c.GPU.SampleEvery = c.Power.Interval
	// The loop waits for the meter's and the GPUs' reads each step as
	// long as for a slow meter's (power.meter-timeout), at most
	// stats.interval.
	c.Stats.ReadTimeout = c.Power.Timeout
	if err := s.Check(); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks every setting and returns all problems, each naming the
// key and what is allowed.
func (c *Config) Validate() error { return c.settings().Check() }
