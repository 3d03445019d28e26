// Package config loads wattrace's configuration from, lowest to highest
// precedence: built-in defaults, a YAML file (--config.file), environment
// variables (WATTRACE_ prefix) and command-line flags.
//
// Every setting has exactly one key, which is the flag name without the
// leading dashes ("web.listen-address"). The same key is used in the YAML
// file and, upper-cased with dots and dashes turned into underscores, as the
// environment variable (WATTRACE_WEB_LISTEN_ADDRESS). One name per setting
// means the documentation needs a single table, and a test checks that table.
package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/collector"
	"github.com/wattrace/wattrace/pkg/gpu/node"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// EnvPrefix is prepended (with an underscore) to every environment variable.
const EnvPrefix = "WATTRACE"

// Keys. They double as flag names and YAML keys.
const (
	KeyConfigFile = cli.KeyConfigFile

	KeyWebListenAddress = "web.listen-address"
	KeyWebConfigFile    = "web.config.file"
	KeyWebTelemetryPath = "web.telemetry-path"

	KeyPathProcfs   = "path.procfs"
	KeyPathSysfs    = "path.sysfs"
	KeyPathCgroupfs = "path.cgroupfs"
	KeyPathEtc      = "path.etc"

	KeyLogLevel  = "log.level"
	KeyLogFormat = "log.format"

	KeyAccountingMode  = "accounting.mode"
	KeyCgroupHierarchy = "cgroup.hierarchy"

	KeyStatsInterval  = "stats.interval"
	KeyStatsRetention = "stats.retention"
	KeyStatsOnDemand  = "stats.on-demand"
	KeyStatsMaxGap    = "stats.max-gap"

	KeyPowerIdleWatts   = "power.idle-watts"
	KeyPowerIdlePolicy  = "power.idle-policy"
	KeyPowerUsageMetric = "power.usage-metric"
	// The meters' power.* keys are declared by pkg/power/discover beside
	// the meters, the collectors' collector.<name>.* by their
	// registrations.

	KeyPerfEnvVar         = "collector.perf.env-var"
	KeyPerfHardware       = "collector.perf.hardware-events"
	KeyPerfSoftware       = "collector.perf.software-events"
	KeyPerfCache          = "collector.perf.cache-events"
	KeyPerfMaxProcesses   = "collector.perf.max-processes"
	KeyWebAlloyTargets    = "web.alloy-targets"
	KeyProbesDisable      = "collector.probes.disable"
	KeyProbesCounters     = "collector.probes.counters"
	KeyCollectorResources = "collector.resources"

	KeyWorkloadLibvirtDirs  = "workload.libvirt.dirs"
	KeyWorkloadKubeURL      = "workload.kube.url"
	KeyWorkloadKubeToken    = "workload.kube.token-file"
	KeyWorkloadKubeCA       = "workload.kube.ca-file"
	KeyWorkloadKubeInsecure = "workload.kube.insecure-skip-verify"
	KeyWorkloadKubeRefresh  = "workload.kube.refresh"
)

// Allowed values of the enumerated settings, in the order they are listed
// in error messages and help text.
var (
	LogLevels = cli.LogLevels
	// ResourceGroups are the cgroup resource groups collector.resources
	// may name.
	ResourceGroups    = []string{"cpu", "memory", "io", "pressure", "tasks"}
	LogFormats        = cli.LogFormats
	AccountingModes   = []string{"auto", "bpf", "procfs"}
	CgroupHierarchies = []string{"auto", "v2", "cpuacct", "cpu"}
	UsageMetrics      = []string{"cpu_time", "cycles", "instructions", "cache_misses", "cpu_clock"}
	IdlePolicies      = []string{"none", "even", "cpu"}
)

// DefaultListenAddress is the exporter's port. 9841 is not claimed on the
// Prometheus "default port allocations" wiki page as far as we know; change
// it there and here together if that turns out to be wrong.
const DefaultListenAddress = ":9841"

// Config is the complete, validated configuration.
type Config struct {
	// ConfigFile is the YAML file the configuration was read from, "" if none.
	ConfigFile string
	// ShowVersion is set by --version; it is not a setting and is never read
	// from the file or the environment.
	ShowVersion bool

	Web        Web
	Path       Path
	Log        Log
	Accounting Accounting
	Cgroup     Cgroup
	Stats      Stats
	Power      Power
	Collector  Collector
	Workload   Workload
	Emissions  Emissions
	// GPU is the gpu.* block (pkg/config/gpu.go).
	GPU node.Config
	// Guests is the guests.* block (pkg/config/vm.go).
	Guests Guests
}

// Workload configures how cgroups are named after the workloads that own
// them.
type Workload struct {
	// LibvirtDirs hold domain XML (running domains first).
	LibvirtDirs []string
	Kube        Kube
}

// Kube configures the kubelet client that names pods and containers.
type Kube struct {
	URL                string // "" = off
	TokenFile          string
	CAFile             string
	InsecureSkipVerify bool
	Refresh            time.Duration
}

// Web configures the HTTP server.
type Web struct {
	ListenAddresses []string
	// AlloyTargets serves /alloy-targets for Grafana Alloy's discovery.http.
	AlloyTargets bool
	// ConfigFile is an exporter-toolkit web configuration (TLS, basic auth).
	ConfigFile    string
	TelemetryPath string
}

// Path holds the mount points of the kernel file systems, so that the
// exporter can run in a container with the host's mounted elsewhere.
type Path struct {
	Procfs   string
	Sysfs    string
	Cgroupfs string
	Etc      string
}

// Log configures the logger.
type Log struct {
	Level  string
	Format string
}

// Accounting chooses how per-task CPU time is collected.
type Accounting struct {
	Mode string // auto | bpf | procfs
}

// Cgroup chooses the hierarchy that keys workloads.
type Cgroup struct {
	Hierarchy string // auto | v2 | cpuacct | cpu
}

// Stats configures the accounting loop.
type Stats struct {
	Interval  time.Duration
	Retention time.Duration
	// OnDemand steps the loop when a scrape finds its figures older than
	// Interval, and otherwise every MaxGap (or sooner where a source
	// needs it), instead of every Interval.
	OnDemand bool
	MaxGap   time.Duration
}

// Power configures the energy source and the idle model.
type Power struct {
	// Config is the meters' settings (power.source, power.ipmi,
	// power.max-watts, power.estimator.*, power.host-share.*, each
	// meter's own): declared, decoded and checked as pkg/power/discover
	// declares them, in the shape discover.Open reads.
	discover.Config
	IdleWatts  map[string]float64 // zone name -> watts
	IdlePolicy string             // none | even | cpu
	// UsageMetric is the metric each zone's dynamic energy is split by:
	// cpu_time (default) or a perf counter (cycles, instructions,
	// cache_misses, cpu_clock).
	UsageMetric map[string]string
}

// loader reads the exporter's settings (internal/cli); the per-zone maps
// may be nested in the file.
var loader = cli.Loader{
	Prefix:      EnvPrefix,
	NotSettings: map[string]bool{"version": true},
	Maps: func(key string) bool {
		if key == KeyPowerIdleWatts || key == KeyGPUIdleWatts {
			return true
		}
		// A declared map (power.max-watts, or a meter's or collector's own)
		// nests without this package naming it.
		for _, s := range []*setting.Set{meterSettings(&discover.Config{}), collectorSettings(collector.Settings{})} {
			if st := s.Lookup(key); st != nil && st.Kind == setting.Map {
				return true
			}
		}
		return false
	},
}

// collectorSettings declares the collectors' own settings bound to st.
func collectorSettings(st collector.Settings) *setting.Set {
	s := &setting.Set{}
	st.Declare(s)
	return s
}

// meterSettings declares the meters' settings bound to p.
func meterSettings(p *discover.Config) *setting.Set {
	s := &setting.Set{}
	p.Declare(s)
	return s
}

// Collector enables collectors.
type Collector struct {
	// Enabled says, per collector with a flag (collector.Registered), whether
	// collector.<name> turns it on.
	Enabled map[string]bool
	// Settings are the collectors' own settings (collector.process.top,
	// collector.probes.per-cgroup, …), declared by their registrations.
	Settings collector.Settings
	// LevelOn says, per workload level (ident.Levels), whether
	// collector.<level> exports it.
	LevelOn map[ident.Kind]bool
	// ProbesDisable names probes to leave out, ProbesCounters the perf
	// counters read at context switches (collector.probes on, BPF mode).
	ProbesDisable  []string
	ProbesCounters []string
	// Resources are the cgroup resource groups read and exported per
	// workload (ResourceGroups); none reads no cgroup file.
	Resources []string
	// With collector.perf, the processes whose environment holds one of
	// PerfEnvVars are profiled with these events.
	PerfEnvVars      []string
	PerfHardware     []string
	PerfSoftware     []string
	PerfCache        []string
	PerfMaxProcesses int
}

// KeyCollector is the configuration key that turns a collector on or off.
func KeyCollector(name string) string { return "collector." + name }

// enabledCollectors reads the collector.<name> key of every collector with
// a flag.
func enabledCollectors(d *decoder) map[string]bool {
	out := map[string]bool{}
	for _, r := range collector.Registered() {
		if r.Flag {
			out[r.Name] = d.Bool(KeyCollector(r.Name))
		}
	}
	return out
}

// Levels returns the workload levels whose collectors are on.
func (c Collector) Levels() []ident.Kind {
	var out []ident.Kind
	for _, l := range ident.Levels() {
		if c.LevelOn[l] {
			out = append(out, l)
		}
	}
	return out
}

// enabledLevels reads the collector.<level> key of every workload level.
func enabledLevels(d *decoder) map[ident.Kind]bool {
	out := map[ident.Kind]bool{}
	for _, l := range ident.Levels() {
		out[l] = d.Bool(KeyCollector(string(l)))
	}
	return out
}

// EnvVar returns the environment variable that sets key.
func EnvVar(key string) string { return loader.EnvVar(key) }

// NewFlagSet returns the exporter's flags with their defaults. Load parses
// it; it is exported so that main can print usage and tests can check that
// every flag is documented.
func NewFlagSet(name string) *pflag.FlagSet {
	fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
	fs.SortFlags = false

	fs.String(KeyConfigFile, "", "YAML configuration file; keys are flag names without the leading dashes, e.g. stats.interval: 10s.")
	fs.Bool("version", false, "Print version information and exit.")

	fs.StringSlice(KeyWebListenAddress, []string{DefaultListenAddress}, "Addresses to listen on for the web interface and telemetry. Repeatable.")
	fs.String(KeyWebConfigFile, "", "Path to an exporter-toolkit web configuration file that enables TLS or authentication.")
	fs.String(KeyWebTelemetryPath, "/metrics", "Path under which to expose metrics.")
	fs.Bool(KeyWebAlloyTargets, true, "Serve /alloy-targets: the processes that opted in to profiling (collector.perf.env-var), as Grafana Alloy discovery.http targets for pyroscope.ebpf.")

	fs.String(KeyPathProcfs, "/proc", "procfs mount point.")
	fs.String(KeyPathSysfs, "/sys", "sysfs mount point.")
	fs.String(KeyPathCgroupfs, "/sys/fs/cgroup", "cgroup file system mount point.")
	fs.String(KeyPathEtc, "/etc", "Host /etc, for user names (passwd).")

	fs.String(KeyLogLevel, "info", "Log level: "+strings.Join(LogLevels, ", ")+".")
	fs.String(KeyLogFormat, "logfmt", "Log format: "+strings.Join(LogFormats, ", ")+".")

	fs.String(KeyAccountingMode, "auto", "Per-task CPU accounting: bpf, procfs, or auto (bpf, falling back to procfs when BPF cannot be loaded).")
	fs.String(KeyCgroupHierarchy, "auto", "cgroup hierarchy that keys workloads: "+strings.Join(CgroupHierarchies, ", ")+".")

	fs.Duration(KeyStatsInterval, 5*time.Second, "Accounting interval: a scrape's figures are at most this old. With stats.on-demand a scrape that finds them older steps the loop; without it the loop steps every interval.")
	fs.Bool(KeyStatsOnDemand, true, "Step the loop when a scrape (or another consumer) asks for figures older than stats.interval, and otherwise only every stats.max-gap or as often as a source needs (a wrapping RAPL counter, GPU sampling, a carbon-intensity change). Totals are the same: every counter read is cumulative.")
	fs.Duration(KeyStatsMaxGap, time.Minute, "With stats.on-demand, the longest the loop goes without a step when nobody asks; bounds how many ended processes the BPF exit maps must hold between reads. At least stats.interval.")
	fs.Duration(KeyStatsRetention, 5*time.Minute, "How long terminated cgroups and processes stay exported, so the last scrape sees their final totals.")

	fs.String(KeyPowerIdleWatts, "", "Fixed idle power per zone, e.g. package=10,dram=2. Zones not listed learn idle power from the minimum seen at low utilization.")
	fs.String(KeyPowerIdlePolicy, "none", "How idle energy is attributed to workloads: none (kept at node level), even (split evenly among active workloads), cpu (by CPU time).")
	fs.String(KeyPowerUsageMetric, "", "What each zone's dynamic energy is split by, e.g. package=instructions,dram=cache_misses: cpu_time (default), or a perf counter from collector.probes.counters (cycles, instructions, cache_misses, cpu_clock); zones whose counter is unavailable use cpu_time.")
	cli.AddFlags(fs, meterSettings(&discover.Config{}))
	gpuFlags(fs)

	for _, r := range collector.Registered() {
		if r.Flag {
			fs.Bool(KeyCollector(r.Name), r.DefaultOn, r.Help)
		}
	}
	cli.AddFlags(fs, collectorSettings(collector.Settings{}))
	for _, l := range ident.Levels() {
		fs.Bool(KeyCollector(string(l)), true, ident.LevelHelp(l))
	}

	fs.StringSlice(KeyProbesDisable, nil, "Probes not to load: pagecache_read, pagecache_add, pagecache_dirty, softirq, block, net, counters.")
	fs.StringSlice(KeyCollectorResources, []string{"memory"}, "Cgroup resource groups read and exported per workload, each file at most once per scrape: cpu, memory, io, pressure, tasks (empty: none). Series per workload: cpu 2, memory up to 7, io 4 per device, pressure up to 6, tasks 1.")
	fs.StringSlice(KeyProbesCounters, nil, "Perf counters read at every context switch: cycles, instructions, cache_misses, or cpu_clock (software stand-in). Off by default: reading one costs about 450 ns per context switch on every process (docs/performance.md); none opened means the counters program is not attached.")
	fs.StringSlice(KeyPerfEnvVar, []string{"WATTRACE_PROFILE"}, "Environment variables that opt a process in to profiling (any non-empty value). Repeatable.")
	fs.StringSlice(KeyPerfHardware, []string{"cpu_cycles", "instructions", "cache_references", "cache_misses", "branch_instructions", "branch_misses"}, "Hardware events for opted-in processes (unavailable ones are logged once and skipped).")
	fs.StringSlice(KeyPerfSoftware, []string{"task_clock", "context_switches", "cpu_migrations", "page_faults"}, "Software events for opted-in processes.")
	fs.StringSlice(KeyPerfCache, nil, "Cache events for opted-in processes, e.g. l1d_read_miss, ll_read_access.")
	fs.Int(KeyPerfMaxProcesses, 128, "Most processes profiled at once; more wait for a slot.")
	fs.StringSlice(KeyWorkloadLibvirtDirs, []string{"/run/libvirt/qemu", "/etc/libvirt/qemu"}, "Directories of libvirt domain XML, for VM names and UUIDs. Repeatable.")
	fs.String(KeyWorkloadKubeURL, "", "Kubelet pods endpoint for pod and container names, e.g. https://$(NODE_IP):10250/pods. Empty: names come from cgroup paths only.")
	fs.String(KeyWorkloadKubeToken, "/var/run/secrets/kubernetes.io/serviceaccount/token", "Bearer token file for the kubelet.")
	fs.String(KeyWorkloadKubeCA, "", "CA file for the kubelet's certificate. Empty: the system roots.")
	fs.Bool(KeyWorkloadKubeInsecure, false, "Skip verifying the kubelet's certificate (often self-signed).")
	fs.Duration(KeyWorkloadKubeRefresh, 30*time.Second, "How often the pod list is refreshed (and at most how stale names are).")
	emissionsFlags(fs)
	vmFlags(fs)
	return fs
}

// Load parses args (without the program name) and merges them with the
// environment, the configuration file and the defaults, then validates the
// result. On --help it returns an error wrapping pflag.ErrHelp after the
// flag set has printed usage.
func Load(args []string) (*Config, error) {
	fs := NewFlagSet("wattrace")
	d, cfgFile, err := loader.Load(fs, args)
	if err != nil {
		return nil, err
	}
	cfg, err := decode(d)
	if err != nil {
		return nil, err
	}
	cfg.ConfigFile = cfgFile
	cfg.ShowVersion, _ = fs.GetBool("version")
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decode reads the loaded values into the configuration; every value
// that doesn't parse is reported with its key.
func decode(d *decoder) (*Config, error) {
	c := &Config{
		Web: Web{
			ListenAddresses: d.Strings(KeyWebListenAddress),
			ConfigFile:      d.String(KeyWebConfigFile),
			TelemetryPath:   d.String(KeyWebTelemetryPath),
			AlloyTargets:    d.Bool(KeyWebAlloyTargets),
		},
		Path: Path{
			Procfs:   d.String(KeyPathProcfs),
			Sysfs:    d.String(KeyPathSysfs),
			Cgroupfs: d.String(KeyPathCgroupfs),
			Etc:      d.String(KeyPathEtc),
		},
		Log:        Log{Level: d.String(KeyLogLevel), Format: d.String(KeyLogFormat)},
		Accounting: Accounting{Mode: d.String(KeyAccountingMode)},
		Cgroup:     Cgroup{Hierarchy: d.String(KeyCgroupHierarchy)},
		Stats: Stats{
			Interval:  d.Duration(KeyStatsInterval),
			Retention: d.Duration(KeyStatsRetention),
			OnDemand:  d.Bool(KeyStatsOnDemand),
			MaxGap:    d.Duration(KeyStatsMaxGap),
		},
		Power: Power{
			IdleWatts:   d.Map(KeyPowerIdleWatts),
			IdlePolicy:  d.String(KeyPowerIdlePolicy),
			UsageMetric: zoneMetrics(d, KeyPowerUsageMetric),
		},
		Collector: Collector{
			Enabled:          enabledCollectors(d),
			Settings:         collector.Settings{},
			LevelOn:          enabledLevels(d),
			ProbesDisable:    d.Strings(KeyProbesDisable),
			ProbesCounters:   d.Strings(KeyProbesCounters),
			Resources:        d.Strings(KeyCollectorResources),
			PerfEnvVars:      d.Strings(KeyPerfEnvVar),
			PerfHardware:     d.Strings(KeyPerfHardware),
			PerfSoftware:     d.Strings(KeyPerfSoftware),
			PerfCache:        d.Strings(KeyPerfCache),
			PerfMaxProcesses: d.Int(KeyPerfMaxProcesses),
		},
		Workload: Workload{
			LibvirtDirs: d.Strings(KeyWorkloadLibvirtDirs),
			Kube: Kube{
				URL:                d.String(KeyWorkloadKubeURL),
				TokenFile:          d.String(KeyWorkloadKubeToken),
				CAFile:             d.String(KeyWorkloadKubeCA),
				InsecureSkipVerify: d.Bool(KeyWorkloadKubeInsecure),
				Refresh:            d.Duration(KeyWorkloadKubeRefresh),
			},
		},
		GPU: decodeGPU(d),
	}
	d.Decode(meterSettings(&c.Power.Config))
	// amdgpu power is sampled as often as the slow meters are read
	// (power.meter-interval).
	c.GPU.SampleEvery = c.Power.Interval
	d.Decode(collectorSettings(c.Collector.Settings))
	c.Emissions = decodeEmissions(d)
	c.Guests = decodeVM(d)
	if err := d.Err(); err != nil {
		return nil, err
	}
	return c, nil
}

// decoder is the shared strict decoder (internal/cli).
type decoder = cli.Decoder

// zoneMetrics parses zone=metric pairs such as package=cycles.
func zoneMetrics(d *decoder, key string) map[string]string {
	out := map[string]string{}
	val := d.String(key)
	for _, item := range strings.Split(val, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		zone, metric, ok := strings.Cut(item, "=")
		zone, metric = strings.TrimSpace(zone), strings.TrimSpace(metric)
		if !ok || zone == "" || !slices.Contains(UsageMetrics, metric) {
			d.Fail(key, val, "want zone=metric pairs such as package=instructions, metric one of "+strings.Join(UsageMetrics, ", "))
			return nil
		}
		out[zone] = metric
	}
	return out
}

// checkListenAddress parses a listen address as net.Listen would take it,
// so that a wrong one stops start-up before anything is loaded.
func checkListenAddress(a string) error {
	_, port, err := net.SplitHostPort(a)
	if err != nil {
		return err
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return err
	}
	return nil
}

// Validate checks every setting and returns all problems, each naming the
// key and what is allowed.
func (c *Config) Validate() error {
	var errs []error
	enum := func(key, val string, allowed []string) {
		for _, a := range allowed {
			if val == a {
				return
			}
		}
		errs = append(errs, fmt.Errorf("invalid value %q for %s: allowed %s", val, key, strings.Join(allowed, ", ")))
	}
	positive := func(key string, d time.Duration) {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("invalid value %q for %s: must be > 0", d.String(), key))
		}
	}
	nonNegative := func(key string, f float64) {
		if f < 0 {
			errs = append(errs, fmt.Errorf("invalid value %q for %s: must be >= 0", strconv.FormatFloat(f, 'g', -1, 64), key))
		}
	}
	nonEmpty := func(key, val string) {
		if val == "" {
			errs = append(errs, fmt.Errorf("invalid value \"\" for %s: must not be empty", key))
		}
	}

	enum(KeyLogLevel, c.Log.Level, LogLevels)
	enum(KeyLogFormat, c.Log.Format, LogFormats)
	enum(KeyAccountingMode, c.Accounting.Mode, AccountingModes)
	enum(KeyCgroupHierarchy, c.Cgroup.Hierarchy, CgroupHierarchies)
	positive(KeyWorkloadKubeRefresh, c.Workload.Kube.Refresh)
	enum(KeyPowerIdlePolicy, c.Power.IdlePolicy, IdlePolicies)
	if n := c.Collector.PerfMaxProcesses; n < 0 {
		// The profiler refuses it too, but only once collector.perf is on
		// and without the key.
		errs = append(errs, fmt.Errorf("invalid value \"%d\" for %s: must be >= 0 (0 = 128)", n, KeyPerfMaxProcesses))
	}
	for _, g := range c.Collector.Resources {
		enum(KeyCollectorResources, g, ResourceGroups)
	}

	positive(KeyStatsInterval, c.Stats.Interval)
	positive(KeyStatsRetention, c.Stats.Retention)
	positive(KeyStatsMaxGap, c.Stats.MaxGap)
	if c.Stats.MaxGap > 0 && c.Stats.MaxGap < c.Stats.Interval {
		errs = append(errs, fmt.Errorf("invalid value \"%v\" for %s: must be at least %s (%v)", c.Stats.MaxGap, KeyStatsMaxGap, KeyStatsInterval, c.Stats.Interval))
	}

	if len(c.Web.ListenAddresses) == 0 {
		errs = append(errs, fmt.Errorf("invalid value \"\" for %s: at least one address is required", KeyWebListenAddress))
	}
	for _, a := range c.Web.ListenAddresses {
		if err := checkListenAddress(a); err != nil {
			errs = append(errs, fmt.Errorf("invalid value %q for %s: %v (want host:port or :port)", a, KeyWebListenAddress, err))
		}
	}
	knownZone := func(key, zone string) {
		if !slices.Contains(power.Zones(), zone) {
			errs = append(errs, fmt.Errorf("invalid zone %q in %s: allowed %s", zone, key, strings.Join(power.Zones(), ", ")))
		}
	}
	for _, z := range slices.Sorted(maps.Keys(c.Power.IdleWatts)) {
		knownZone(KeyPowerIdleWatts, z)
	}
	for _, z := range slices.Sorted(maps.Keys(c.Power.UsageMetric)) {
		knownZone(KeyPowerUsageMetric, z)
	}
	if p := c.Web.TelemetryPath; !strings.HasPrefix(p, "/") || p == "/" || strings.HasPrefix(p, "/-/") {
		errs = append(errs, fmt.Errorf("invalid value %q for %s: must start with / and not be / or under /-/ (landing page and health endpoints)", p, KeyWebTelemetryPath))
	}
	nonEmpty(KeyPathProcfs, c.Path.Procfs)
	nonEmpty(KeyPathSysfs, c.Path.Sysfs)
	nonEmpty(KeyPathCgroupfs, c.Path.Cgroupfs)

	zones := make([]string, 0, len(c.Power.IdleWatts))
	for z := range c.Power.IdleWatts {
		zones = append(zones, z)
	}
	sort.Strings(zones)
	for _, z := range zones {
		nonNegative(KeyPowerIdleWatts+"."+z, c.Power.IdleWatts[z])
	}
	if err := c.Power.Check(); err != nil {
		errs = append(errs, err)
	}
	if err := c.GPU.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Collector.Settings.Check(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Emissions.validate(); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateVM()...)
	return errors.Join(errs...)
}
