package main

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cgroupstats"
	"github.com/wattrace/wattrace/internal/cli"
	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/discover"
	"github.com/wattrace/wattrace/pkg/power/redfish"
	"github.com/wattrace/wattrace/pkg/workload"
	"github.com/wattrace/wattrace/pkg/workload/ident"
	"github.com/wattrace/wattrace/pkg/workload/kube"
)

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "wattrace.yml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDefaults(t *testing.T) {
	c, err := Load(nil)
	if err != nil {
		t.Fatal(err)
	}
	want := &Config{
		Web:        webSettings{ListenAddresses: []string{":9841"}, TelemetryPath: "/metrics", AlloyTargets: true},
		Path:       pathSettings{Procfs: "/proc", Sysfs: "/sys", Cgroupfs: "/sys/fs/cgroup", Etc: "/etc"},
		Log:        cli.Log{Level: "info", Format: "logfmt"},
		Accounting: compose.AccountingConfig{Mode: "auto"},
		Cgroup:     cgroup.Settings{Hierarchy: "auto"},
		// ReadTimeout is power.meter-timeout's.
		Stats: stats.Config{Interval: 5 * time.Second, Retention: 5 * time.Minute, OnDemand: true, MaxGap: time.Minute,
			IdleWatts: map[string]float64{}, UsageMetric: map[string]string{}, IdlePolicy: "none", VMIdleSplit: "even",
			ReadTimeout: 5 * time.Second},
		Collector: collector.Selection{Enabled: map[string]bool{"node": true, "cgroup": true, "process": true, "bpf-stats": false, "probes": true, "perf": false, "gpu": true},
			LevelOn: map[ident.Kind]bool{"container": true, "pod": true, "vm": true, "job": true, "pbs_job": true, "unit": true}},
		Resources: cgroupstats.Settings{Resources: []string{"memory"}, StaleScrapes: 1},
		Perf: profiling.Config{EnvVars: []string{"WATTRACE_PROFILE"},
			Hardware:     []string{"cpu_cycles", "instructions", "cache_references", "cache_misses", "branch_instructions", "branch_misses"},
			Software:     []string{"task_clock", "context_switches", "cpu_migrations", "page_faults"},
			MaxProcesses: 128},
		Workload: workload.Options{LibvirtDirs: []string{"/run/libvirt/qemu", "/etc/libvirt/qemu"}},
		Kube:     kube.Config{TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token", Refresh: 30 * time.Second},
		// On by default with the constant provider: pkg/carbon's defaults.
		Emissions: carbon.Settings{Enabled: true, Carbon: carbon.DefaultConfig()},
		GPU: node.Config{NVML: "auto", Sysfs: "auto", IdleWatts: map[string]float64{}, IdlePolicy: "none",
			SampleEvery: time.Second, SysfsRoot: "/sys", ProcfsRoot: "/proc"},
		Guests:  guestshare.Config{Interval: 5 * time.Second},
		Runtime: runtimeSettings{MemoryHeadroom: 0.5},
	}
	// The meters' settings, as pkg/power/discover declares them: its
	// exported fields, then each row's own.
	meters := c.Power
	c.Power = discover.Config{}
	// The collectors' own settings, as their registrations declare them.
	if st := c.Collector.Settings; len(st) != 3 || st.Process().Top != 20 {
		t.Errorf("collector settings %v, process.top %d: want process, probes and cgroup's, top 20", st, st.Process().Top)
	}
	c.Collector.Settings = nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", c, want)
	}
	wantMeters := discover.Config{Source: "auto", IPMI: "auto",
		Interval: time.Second, Timeout: 5 * time.Second, MaxWatts: power.MaxWatts{},
		HostShare: "/run/wattrace/host", HostShareStaleness: 15 * time.Second}
	gv, wv := reflect.ValueOf(meters), reflect.ValueOf(wantMeters)
	for i := 0; i < gv.NumField(); i++ {
		if f := gv.Type().Field(i); f.IsExported() && !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			t.Errorf("power %s = %v, want %v", f.Name, gv.Field(i), wv.Field(i))
		}
	}
	if o, ok := meters.Own("capmc").(*discover.CapmcSettings); !ok || o.Mode != "off" {
		t.Errorf("power.capmc = %+v", meters.Own("capmc"))
	}
	if o, ok := meters.Own("redfish").(*redfish.Config); !ok || *o != (redfish.Config{Auth: "session", Timeout: 5 * time.Second, ExternalHeader: "X-Redfish-Url"}) {
		t.Errorf("power.redfish.* = %+v", meters.Own("redfish"))
	}
}

// The stats loop waits for a read each step as long as power.meter-timeout
// allows a slow meter's.
func TestStepReadTimeoutIsTheMeterTimeout(t *testing.T) {
	c, err := Load([]string{"--power.meter-timeout=2s"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Stats.ReadTimeout != 2*time.Second || c.Power.Timeout != 2*time.Second {
		t.Errorf("stats read timeout %v, power.meter-timeout %v, want 2s both", c.Stats.ReadTimeout, c.Power.Timeout)
	}
}

// TestPrecedence checks defaults < file < environment < flags for settings
// of every value type.
func TestPrecedence(t *testing.T) {
	file := `
log.level: warn
stats:
  interval: 10s
collector.process: true
collector.process.top: 7
power.idle-watts:
  package: 12.5
  dram: 3
power.estimator.max-watts-per-cpu: 9
web.listen-address: [":1000", ":1001"]
`
	tests := []struct {
		name  string
		file  string
		env   map[string]string
		args  []string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "file over defaults",
			file: file,
			check: func(t *testing.T, c *Config) {
				eq(t, c.Log.Level, "warn")
				eq(t, c.Stats.Interval, 10*time.Second)
				eq(t, c.Stats.Retention, 5*time.Minute) // default kept
				eq(t, c.Collector.Enabled["process"], true)
				eq(t, c.Collector.Settings.Process().Top, 7)
				eq(t, c.Stats.IdleWatts, map[string]float64{"package": 12.5, "dram": 3})
				eq(t, c.Power.MaxWattsPerCPU, 9.0)
				eq(t, c.Web.ListenAddresses, []string{":1000", ":1001"})
			},
		},
		{
			name: "env over file",
			file: file,
			env: map[string]string{
				"WATTRACE_LOG_LEVEL":             "debug",
				"WATTRACE_STATS_INTERVAL":        "2s",
				"WATTRACE_COLLECTOR_PROCESS_TOP": "3",
				"WATTRACE_POWER_IDLE_WATTS":      "package=1",
				"WATTRACE_WEB_LISTEN_ADDRESS":    ":2000",
				"WATTRACE_COLLECTOR_BPF_STATS":   "true",
			},
			check: func(t *testing.T, c *Config) {
				eq(t, c.Log.Level, "debug")
				eq(t, c.Stats.Interval, 2*time.Second)
				eq(t, c.Collector.Settings.Process().Top, 3)
				eq(t, c.Collector.Enabled["process"], true) // from file
				eq(t, c.Collector.Enabled["bpf-stats"], true)
				eq(t, c.Stats.IdleWatts, map[string]float64{"package": 1})
				eq(t, c.Web.ListenAddresses, []string{":2000"})
			},
		},
		{
			name: "flags over env and file",
			file: file,
			env: map[string]string{
				"WATTRACE_LOG_LEVEL":             "debug",
				"WATTRACE_COLLECTOR_PROCESS_TOP": "3",
			},
			args: []string{
				"--log.level=error",
				"--collector.process.top=0",
				"--collector.process=false",
				"--stats.interval=1m",
				"--power.idle-watts=package=4,dram=0.5",
				"--web.listen-address=:3000", "--web.listen-address=:3001",
			},
			check: func(t *testing.T, c *Config) {
				eq(t, c.Log.Level, "error")
				eq(t, c.Collector.Settings.Process().Top, 0)
				eq(t, c.Collector.Enabled["process"], false)
				eq(t, c.Stats.Interval, time.Minute)
				eq(t, c.Stats.IdleWatts, map[string]float64{"package": 4, "dram": 0.5})
				eq(t, c.Web.ListenAddresses, []string{":3000", ":3001"})
				eq(t, c.Power.MaxWattsPerCPU, 9.0) // from file
			},
		},
		{
			name: "config file named by environment",
			env:  map[string]string{"WATTRACE_CONFIG_FILE": "FILE"},
			file: "log.format: json\n",
			check: func(t *testing.T, c *Config) {
				eq(t, c.Log.Format, "json")
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				p := writeFile(t, tt.file)
				if tt.env["WATTRACE_CONFIG_FILE"] == "FILE" {
					tt.env["WATTRACE_CONFIG_FILE"] = p
				} else {
					args = append([]string{"--config.file=" + p}, args...)
				}
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := Load(args)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func eq[T any](t *testing.T, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestLoadErrors(t *testing.T) {
	tests := []struct {
		name string
		file string
		env  map[string]string
		args []string
		want string
	}{
		{name: "bad enum flag", args: []string{"--log.level=x"}, want: `invalid value "x" for log.level: allowed debug, info, warn, error`},
		{name: "bad enum env", env: map[string]string{"WATTRACE_ACCOUNTING_MODE": "ebpf"}, want: `invalid value "ebpf" for accounting.mode: allowed auto, bpf, procfs`},
		{name: "bad duration env", env: map[string]string{"WATTRACE_STATS_INTERVAL": "five"}, want: `invalid value "five" for stats.interval: want a duration`},
		{name: "unitless duration in file", file: "stats.retention: 5\n", want: `invalid value "5" for stats.retention: want a duration`},
		{name: "bad int env", env: map[string]string{"WATTRACE_COLLECTOR_PROCESS_TOP": "ten"}, want: `invalid value "ten" for collector.process.top: want an integer`},
		{name: "bad bool env", env: map[string]string{"WATTRACE_COLLECTOR_NODE": "maybe"}, want: `invalid value "maybe" for collector.node: want true or false`},
		{name: "bad idle watts", args: []string{"--power.idle-watts=package"}, want: `invalid value "package" for power.idle-watts: want zone=watts pairs`},
		{name: "unknown file key", file: "stats.intervall: 5s\nlog: {levl: x}\n", want: "unknown keys log.levl, stats.intervall"},
		{name: "missing file", args: []string{"--config.file=/nonexistent/wattrace.yml"}, want: "reading config file /nonexistent/wattrace.yml"},
		{name: "stray argument", args: []string{"metrics"}, want: "unexpected arguments"},
		// Each of these used to be accepted silently or
		// to fail only once the exporter was serving, without the key.
		{name: "idle watts zone typo", args: []string{"--power.idle-watts=pakage=5"}, want: `invalid zone "pakage" in power.idle-watts: allowed core, dram, gpu, package`},
		{name: "idle watts zone typo in file", file: "power.idle-watts: {dram: 2, packge: 5}\n", want: `invalid zone "packge" in power.idle-watts`},
		{name: "usage metric zone typo", args: []string{"--power.usage-metric=dramm=cycles"}, want: `invalid zone "dramm" in power.usage-metric`},
		{name: "flat and nested", file: "stats.interval: 5s\nstats:\n  interval: 10s\n", want: "key stats.interval is set twice (flat and nested)"},
		{name: "idle watts flat and nested", file: "power.idle-watts: package=5\npower:\n  idle-watts: {dram: 2}\n", want: "key power.idle-watts is set twice"},
		{name: "bare port in file", file: "web.listen-address: 19304\n", want: `invalid value "19304" for web.listen-address`},
		{name: "bad port", args: []string{"--web.listen-address=:99999"}, want: `invalid value ":99999" for web.listen-address`},
		{name: "NaN float", args: []string{"--power.estimator.max-watts-per-cpu=NaN"}, want: `invalid value "NaN" for power.estimator.max-watts-per-cpu: want a finite number`},
		{name: "Inf idle watts", args: []string{"--power.idle-watts=package=+Inf"}, want: `invalid value "package=+Inf" for power.idle-watts`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args
			if tt.file != "" {
				args = append(args, "--config.file="+writeFile(t, tt.file))
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			_, err := Load(args)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	fs := NewFlagSet("wattrace")
	fs.SetOutput(&strings.Builder{})
	if err := fs.Parse([]string{"--help"}); !errors.Is(err, pflag.ErrHelp) {
		t.Fatalf("got %v, want ErrHelp", err)
	}
}

func valid() Config {
	c, err := Load(nil)
	if err != nil {
		panic(err)
	}
	return *c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   string // "" = valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"log.level", func(c *Config) { c.Log.Level = "trace" }, `invalid value "trace" for log.level: allowed debug, info, warn, error`},
		{"log.format", func(c *Config) { c.Log.Format = "text" }, `invalid value "text" for log.format: allowed logfmt, json`},
		{"accounting.mode", func(c *Config) { c.Accounting.Mode = "ebpf" }, `invalid value "ebpf" for accounting.mode: allowed auto, bpf, procfs`},
		{"cgroup.hierarchy", func(c *Config) { c.Cgroup.Hierarchy = "v1" }, `invalid value "v1" for cgroup.hierarchy: allowed auto, v2, cpuacct, cpu`},
		{"power.source", func(c *Config) { c.Power.Source = "ipmi" }, `invalid value "ipmi" for power.source: allowed auto, rapl, estimator`},
		{"power.idle-policy", func(c *Config) { c.Stats.IdlePolicy = "share" }, `invalid value "share" for power.idle-policy: allowed none, even, cpu`},
		{"enum is case-sensitive", func(c *Config) { c.Log.Level = "INFO" }, `invalid value "INFO" for log.level`},
		{"interval zero", func(c *Config) { c.Stats.Interval = 0 }, `invalid value "0s" for stats.interval: must be > 0`},
		{"interval negative", func(c *Config) { c.Stats.Interval = -time.Second }, `invalid value "-1s" for stats.interval: must be > 0`},
		{"retention zero", func(c *Config) { c.Stats.Retention = 0 }, `invalid value "0s" for stats.retention: must be > 0`},
		{"retention negative", func(c *Config) { c.Stats.Retention = -time.Minute }, `invalid value "-1m0s" for stats.retention: must be > 0`},
		{"max gap zero", func(c *Config) { c.Stats.MaxGap = 0 }, `invalid value "0s" for stats.max-gap: must be > 0`},
		{"max gap below interval", func(c *Config) { c.Stats.MaxGap = time.Second }, `invalid value "1s" for stats.max-gap: must be at least stats.interval (5s)`},
		{"process.top negative", func(c *Config) { c.Collector.Settings.Process().Top = -1 }, `invalid value "-1" for collector.process.top`},
		{"unknown resource group", func(c *Config) { c.Resources.Resources = []string{"memory", "disk"} }, `invalid value "disk" for collector.resources`},
		{"idle watts negative", func(c *Config) { c.Stats.IdleWatts = map[string]float64{"dram": -2} }, `invalid value "-2" for power.idle-watts.dram: must be >= 0`},
		{"estimator negative", func(c *Config) { c.Power.MinWattsPerCPU = -1 }, `invalid value "-1" for power.estimator.min-watts-per-cpu`},
		{"estimator max < min", func(c *Config) { c.Power.MinWattsPerCPU, c.Power.MaxWattsPerCPU = 5, 2 }, `invalid value "2" for power.estimator.max-watts-per-cpu: must be >= power.estimator.min-watts-per-cpu (5)`},
		{"estimator max only", func(c *Config) { c.Power.MaxWattsPerCPU = 2 }, ""},
		// NaN passed the ">= 0" check and was silently
		// replaced by the table; 1e308 gave NaN power.
		{"estimator min NaN", func(c *Config) { c.Power.MinWattsPerCPU = math.NaN() }, `invalid value "NaN" for power.estimator.min-watts-per-cpu`},
		{"estimator max Inf", func(c *Config) { c.Power.MaxWattsPerCPU = math.Inf(1) }, `invalid value "+Inf" for power.estimator.max-watts-per-cpu`},
		{"estimator max absurd", func(c *Config) { c.Power.MaxWattsPerCPU = 1e308 }, `invalid value "1e+308" for power.estimator.max-watts-per-cpu`},
		{"power.capmc", func(c *Config) { c.Power.Own("capmc").(*discover.CapmcSettings).Mode = "on" }, `invalid value "on" for power.capmc: allowed off, auto`},
		{"max-watts zone typo", func(c *Config) { c.Power.MaxWatts = map[string]float64{"pakage": 400} }, `unknown zone "pakage"`},
		{"max-watts NaN", func(c *Config) { c.Power.MaxWatts = map[string]float64{"package": math.NaN()} }, `invalid value "NaN" for power.max-watts.package`},
		{"max-watts zero", func(c *Config) { c.Power.MaxWatts = map[string]float64{"platform": 0} }, `for power.max-watts.platform`},
		{"max-watts set", func(c *Config) { c.Power.MaxWatts = map[string]float64{"package": 400, "platform": 3000} }, ""},
		{"telemetry path relative", func(c *Config) { c.Web.TelemetryPath = "metrics" }, `invalid value "metrics" for web.telemetry-path`},
		{"telemetry path clashes", func(c *Config) { c.Web.TelemetryPath = "/-/healthy" }, `invalid value "/-/healthy" for web.telemetry-path`},
		{"no listen address", func(c *Config) { c.Web.ListenAddresses = nil }, `for web.listen-address: at least one address`},
		{"empty procfs", func(c *Config) { c.Path.Procfs = "" }, `invalid value "" for path.procfs`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.modify(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestValidateReportsAll makes sure one run shows every problem, not just
// the first, so fixing a config file takes one round trip.
func TestValidateReportsAll(t *testing.T) {
	c := valid()
	c.Log.Level = "x"
	c.Stats.Interval = 0
	err := c.Validate()
	if err == nil || strings.Count(err.Error(), "invalid value") != 2 {
		t.Fatalf("got %v, want two problems", err)
	}
}

func TestEnvVar(t *testing.T) {
	eq(t, EnvVar("web.listen-address"), "WATTRACE_WEB_LISTEN_ADDRESS")
	eq(t, EnvVar("power.estimator.min-watts-per-cpu"), "WATTRACE_POWER_ESTIMATOR_MIN_WATTS_PER_CPU")
}

func TestMaxWattsFlagAndYAML(t *testing.T) {
	c, err := Load([]string{"--power.max-watts=package=400,platform=3000", "--power.capmc=auto"})
	if err != nil {
		t.Fatal(err)
	}
	if capmc := c.Power.Own("capmc").(*discover.CapmcSettings).Mode; c.Power.MaxWatts["package"] != 400 || c.Power.MaxWatts["platform"] != 3000 || len(c.Power.MaxWatts) != 2 || capmc != "auto" {
		t.Fatalf("flags: %+v %q", c.Power.MaxWatts, capmc)
	}
	f := writeFile(t, "power:\n  max-watts:\n    dram: 150\n    gpu: 700\n")
	c, err = Load([]string{"--config.file=" + f})
	if err != nil {
		t.Fatal(err)
	}
	if c.Power.MaxWatts["dram"] != 150 || c.Power.MaxWatts["gpu"] != 700 || len(c.Power.MaxWatts) != 2 {
		t.Fatalf("yaml: %+v", c.Power.MaxWatts)
	}
	if _, err := Load([]string{"--power.estimator.min-watts-per-cpu=NaN"}); err == nil || !strings.Contains(err.Error(), "power.estimator.min-watts-per-cpu") {
		t.Fatalf("NaN from the command line: %v", err)
	}
}

// The gpu.* block: flags, environment and a nested YAML map reach
// node.Config, the --path roots are passed through, and each bad value
// stops start-up naming its key.
func TestGPUKeys(t *testing.T) {
	t.Setenv("WATTRACE_GPU_IDLE_POLICY", "holder")
	p := writeFile(t, "gpu:\n  idle-watts:\n    \"0\": 55\n    GPU-abc: 60\n  slurm: true\n")
	c, err := Load([]string{"--config.file=" + p, "--gpu.nvml=off", "--gpu.slurm-gpu-order-map=0:1", "--path.sysfs=/host/sys", "--path.procfs=/host/proc"})
	if err != nil {
		t.Fatal(err)
	}
	g := c.GPU
	if g.NVML != "off" || g.IdlePolicy != "holder" || g.IdleWatts["0"] != 55 || g.IdleWatts["gpu-abc"] != 60 /* YAML map keys are lower-cased; the GPU stage compares case-insensitively */ || !g.Slurm ||
		g.SlurmGPUOrderMap != "0:1" || g.SysfsRoot != "/host/sys" || g.ProcfsRoot != "/host/proc" {
		t.Errorf("%+v", g)
	}
	for flag, key := range map[string]string{"--gpu.nvml=on": "gpu.nvml", "--gpu.sysfs=x": "gpu.sysfs", "--gpu.idle-policy=even": "gpu.idle-policy",
		"--gpu.idle-learn-utilization=2": "gpu.idle-learn-utilization", "--gpu.max-watts=-1": "gpu.max-watts",
		"--gpu.slurm-gpu-order-map=0:x": "gpu.slurm-gpu-order-map", "--gpu.idle-watts=0=-5": "gpu.idle-watts"} {
		if _, err := Load([]string{flag}); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v", flag, err)
		}
	}
}
