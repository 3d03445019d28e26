package main

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/wattrace/wattrace/internal/cli/clitest"
)

// The exporter's settings surface, held whole: every flag with its type,
// default, help and environment variable (what `wattrace --help` and the
// configuration docs show), and the exact error of each bad value. The
// settings' declarations may move between packages; none of this may
// change unless the golden files change with it.

// surfaceFlags renders every flag as `wattrace --help` shows it (pflag's
// usage line: name, type, help, default), one block per flag sorted by
// name, with the environment variable and whether the file and the
// environment may set it.
func surfaceFlags() string {
	fs := NewFlagSet("wattrace")
	fs.SortFlags = true
	return clitest.SurfaceFlags(fs, EnvVar)
}

// stablePaths matches the temporary file a case writes.
var stablePaths = regexp.MustCompile(`/\S*/wattrace\.yml`)

// badSettings are the bad values whose errors the surface holds: every
// check of every setting, a decoding error of every kind, and the file's
// own errors. A case is flag arguments, "ENV=value" entries, or a file
// body (after "file:").
var badSettings = [][]string{
	// Decoding, one of each kind.
	{"--log.level=x"},
	{"WATTRACE_ACCOUNTING_MODE=ebpf"},
	{"WATTRACE_STATS_INTERVAL=five"},
	{"file:stats.retention: 5\n"},
	{"WATTRACE_COLLECTOR_PROCESS_TOP=ten"},
	{"WATTRACE_COLLECTOR_NODE=maybe"},
	{"--power.idle-watts=package"},
	{"--power.estimator.max-watts-per-cpu=NaN"},
	{"--power.idle-watts=package=+Inf"},
	{"file:power.idle-watts: {dram: x}\n"},
	{"WATTRACE_GPU_MAX_WATTS=lots"},
	// The file.
	{"file:stats.intervall: 5s\nlog: {levl: x}\n"},
	{"file:stats.interval: 5s\nstats:\n  interval: 10s\n"},
	{"file:power.idle-watts: package=5\npower:\n  idle-watts: {dram: 2}\n"},
	{"--config.file=/nonexistent/wattrace.yml"},
	{"metrics"},
	// web.*
	{"--web.listen-address="},
	{"file:web.listen-address: 19304\n"},
	{"--web.listen-address=:99999"},
	{"--web.telemetry-path=metrics"},
	{"--web.telemetry-path=/"},
	{"--web.telemetry-path=/-/healthy"},
	// path.*
	{"--path.procfs="},
	{"--path.sysfs="},
	{"--path.cgroupfs="},
	// log.*, accounting, cgroup
	{"--log.format=text"},
	{"--log.level=INFO"},
	{"--cgroup.hierarchy=v1"},
	// stats.*
	{"--stats.interval=0s"},
	{"--stats.interval=-1s"},
	{"--stats.retention=0s"},
	{"--stats.max-gap=0s"},
	{"--stats.max-gap=1s"},
	{"--runtime.memory-headroom=-0.5"},
	{"WATTRACE_RUNTIME_MEMORY_HEADROOM=NaN"},
	// power.* beside the meters
	{"--power.idle-policy=share"},
	{"--power.idle-watts=pakage=5"},
	{"--power.idle-watts=dram=-2"},
	{"--power.usage-metric=dramm=cycles"},
	{"--power.usage-metric=package=bogus"},
	{"--power.usage-metric=package"},
	// The meters'.
	{"--power.source=ipmi"},
	{"--power.ipmi=on"},
	{"--power.estimator.min-watts-per-cpu=-1"},
	{"--power.estimator.min-watts-per-cpu=5", "--power.estimator.max-watts-per-cpu=2"},
	{"--power.estimator.max-watts-per-cpu=1e308"},
	{"--power.meter-interval=0s"},
	{"--power.meter-timeout=0s"},
	{"--power.max-watts=pakage=400"},
	{"--power.max-watts=platform=0"},
	{"--power.host-share.path=mnt"},
	{"--power.host-share.staleness=-1s"},
	{"--power.capmc=on"},
	{"--power.redfish.auth=digest"},
	{"--power.redfish.url=ftp://bmc"},
	// gpu.*
	{"--gpu.nvml=on"},
	{"--gpu.sysfs=x"},
	{"--gpu.idle-policy=even"},
	{"--gpu.idle-learn-utilization=2"},
	{"--gpu.max-watts=-1"},
	{"--gpu.slurm-gpu-order-map=0:x"},
	{"--gpu.idle-watts=0=-5"},
	// collector.*
	{"--collector.process.top=-1"},
	{"--collector.resources=memory,disk"},
	{"--collector.resources.stale-scrapes=-1"},
	{"--collector.resources.stale-scrapes=11"},
	{"--collector.perf.max-processes=-1"},
	{"--collector.probes.disable=sched_swich"},
	{"--collector.probes.counters=cycels"},
	// workload.*
	{"--workload.kube.refresh=0s"},
	// emissions.*
	{"--emissions.provider=static", "--emissions.static.country=ZZ"},
	{"--emissions.provider=static"},
	{"--emissions.provider=coal"},
	{"--emissions.fallback=static,nope", "--emissions.provider=rte", "--emissions.static.country=FR"},
	{"--emissions.fallback=constant"},
	{"--emissions.constant.grams-per-kwh=2500"},
	{"--emissions.constant.grams-per-kwh=-1"},
	{"--emissions.staleness=-1s"},
	{"--emissions.provider=rte", "--emissions.rte.url=ftp://x"},
	{"--emissions.provider=rte", "--emissions.rte.refresh=0s"},
	{"--emissions.provider=electricitymaps"},
	{"--emissions.provider=electricitymaps", "--emissions.electricitymaps.zone=DE", "--emissions.electricitymaps.timeout=0s"},
	{"--emissions.provider=watttime", "--emissions.watttime.region=CAISO_NORTH"},
	// guests.*, vm.*
	{"--guests.share.path=relative"},
	{"--guests.share.interval=0s"},
	{"--guests.share.path=/var/lib/g", "--collector.vm=false"},
	{"--vm.idle-split=cores"},
	// Every problem at once, in one error.
	{"--log.level=x", "--stats.interval=0s", "--gpu.nvml=on", "--emissions.provider=coal", "--vm.idle-split=cores"},
}

// loadCase loads one case of badSettings (or of a good value) and returns
// its configuration and error.
func loadCase(t *testing.T, c []string) (*Config, error) {
	t.Helper()
	return Load(clitest.Args(t, c, EnvPrefix, filepath.Join(t.TempDir(), "wattrace.yml")))
}

// surfaceErrors renders each bad case and its error, file paths made
// stable.
func surfaceErrors(t *testing.T) string {
	return clitest.SurfaceErrors(t, badSettings, func(t *testing.T, _ int, c []string) (func(string) string, error) {
		_, err := loadCase(t, c)
		for _, a := range c {
			if strings.HasPrefix(a, clitest.FilePrefix) {
				return func(msg string) string { return stablePaths.ReplaceAllString(msg, "FILE") }, err
			}
		}
		return nil, err
	})
}

// TestSettingsSurface holds every key's flag, type, default, help and
// environment variable, and every bad value's error, to the golden files
// (go test -run TestSettingsSurface -update rewrites them).
func TestSettingsSurface(t *testing.T) {
	clitest.Golden(t, *update, "testdata/settings/flags.golden", surfaceFlags())
	clitest.Golden(t, *update, "testdata/settings/errors.golden", surfaceErrors(t))
}

// goodValues gives each setting a valid value other than its default
// where the type alone does not suggest one.
var goodValues = map[string]string{
	"web.listen-address":                    ":9999",
	"web.telemetry-path":                    "/m",
	"log.level":                             "debug",
	"log.format":                            "json",
	"accounting.mode":                       "procfs",
	"cgroup.hierarchy":                      "v2",
	"stats.interval":                        "10s",
	"power.idle-watts":                      "package=3",
	"power.idle-policy":                     "even",
	"power.usage-metric":                    "package=cycles",
	"power.source":                          "rapl",
	"power.ipmi":                            "off",
	"power.max-watts":                       "package=400",
	"power.redfish.url":                     "https://bmc.example.com",
	"power.redfish.auth":                    "basic",
	"power.capmc":                           "auto",
	"gpu.nvml":                              "off",
	"gpu.sysfs":                             "off",
	"gpu.idle-watts":                        "0=50",
	"gpu.idle-learn-utilization":            "0.5",
	"gpu.idle-policy":                       "holder",
	"gpu.slurm-gpu-order-map":               "0:1",
	"collector.probes.disable":              "block",
	"collector.resources":                   "cpu,io",
	"collector.probes.counters":             "cycles",
	"emissions.provider":                    "rte",
	"emissions.fallback":                    "rte",
	"emissions.static.country":              "FR",
	"emissions.constant.grams-per-kwh":      "300",
	"vm.idle-split":                         "vcpus",
	"power.estimator.min-watts-per-cpu":     "1",
	"power.estimator.max-watts-per-cpu":     "2",
	"emissions.electricitymaps.url":         "https://em.example.com",
	"emissions.rte.url":                     "https://rte.example.com",
	"emissions.watttime.url":                "https://wt.example.com",
	"power.redfish.external-url":            "https://proxy.example.com",
	"power.host-share.path":                 "/mnt/host",
	"guests.share.path":                     "/var/lib/wattrace/guests",
	"workload.kube.url":                     "https://node:10250/pods",
	"collector.perf.hardware-events":        "instructions",
	"collector.perf.software-events":        "task_clock",
	"collector.perf.cache-events":           "l1d_read_miss",
	"power.redfish.insecure-skip-verify":    "true",
	"workload.kube.insecure-skip-verify":    "true",
	"collector.probes.per-cgroup":           "true",
	"collector.cgroup.workloads":            "true",
	"collector.probes.softirq-per-workload": "true",
}

// alsoNeeds are the other settings a good value needs, given as flags
// whichever source the setting under test comes from.
var alsoNeeds = map[string][]string{
	"power.redfish.url": {"--power.redfish.username=admin", "--power.redfish.password-env=BMC_PASSWORD"},
	// The shares served over vsock are the ones written under the path.
	"guests.share.vsock-port": {"--guests.share.path=" + goodValues["guests.share.path"]},
}

// TestEverySettingFromEachSource: every setting is read from its flag,
// its environment variable and its file key (flat and nested), each
// giving the same configuration, which differs from the defaults.
func TestEverySettingFromEachSource(t *testing.T) {
	clitest.EverySettingFromEachSource(t, clitest.Sources[Config]{
		Flags:  NewFlagSet("wattrace"),
		EnvVar: EnvVar,
		Value:  func(f *pflag.Flag) string { return clitest.GoodValue(f, goodValues) },
		Needs:  func(key string) []string { return alsoNeeds[key] },
		Load:   func(t *testing.T, _ string, c []string) (*Config, error) { return loadCase(t, c) },
		Unfile: func(c *Config) { c.ConfigFile = "" },
	})
}

// Bad configuration stops start-up: main's path (internal/cli.Main with
// the exporter's program) exits 2 before anything runs, the error on
// stderr naming the key, whether the value came from a flag, the
// environment or the file.
func TestBadConfigurationStopsStartUp(t *testing.T) {
	for _, tt := range []struct {
		in   []string
		want string
	}{
		{[]string{"--stats.max-gap=1s"}, `wattrace: invalid value "1s" for stats.max-gap: must be at least stats.interval (5s)`},
		{[]string{"WATTRACE_GPU_IDLE_POLICY=even"}, `wattrace: gpu.idle-policy: "even" is not none or holder`},
		{[]string{"file:web:\n  telemetry-path: /-/metrics\n"}, `wattrace: invalid value "/-/metrics" for web.telemetry-path`},
		{[]string{"file:power.usage-metric: package=watts\n"}, `wattrace: invalid value "package=watts" for power.usage-metric`},
		{[]string{"--guests.share.path=/srv/g", "WATTRACE_COLLECTOR_VM=false"}, `wattrace: invalid value "/srv/g" for guests.share.path: collector.vm is off`},
	} {
		t.Run(strings.Join(tt.in, " "), func(t *testing.T) {
			args := clitest.Args(t, tt.in, EnvPrefix, filepath.Join(t.TempDir(), "wattrace.yml"))
			code, ran, _, stderr := clitest.StopsStartUp(program, args)
			if code != 2 || ran || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, ran %v, stderr %q, want 2 and %q", code, ran, stderr, tt.want)
			}
		})
	}
}
