package discover

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/curves"
	"github.com/wattrace/wattrace/pkg/power/hostshare"
	"github.com/wattrace/wattrace/pkg/power/ipmi"
)

// The power.* keys this package declares and reads (Declare); a meter's
// own keys are declared by its row (Meters).
const (
	KeySource          = "power.source"
	KeyIPMI            = "power.ipmi"
	KeyMeterInterval   = "power.meter-interval"
	KeyMeterTimeout    = "power.meter-timeout"
	KeyMinWattsPerCPU  = "power.estimator.min-watts-per-cpu"
	KeyMaxWattsPerCPU  = "power.estimator.max-watts-per-cpu"
	KeyMaxWatts        = "power.max-watts"
	KeyHostSharePath   = "power.host-share.path"
	KeyHostShareStale  = "power.host-share.staleness"
	KeyHostShareVsock  = "power.host-share.vsock-port"
	defaultMeterPeriod = time.Second
	defaultMeterWait   = 5 * time.Second
)

// Config is everything Open needs: the power.* settings, which it declares
// itself (Declare), and what the exporter learns at start-up (paths, the
// GPU stage's devices). The exporter's configuration decodes into it
// directly, so a setting has this one shape from flag to meter.
type Config struct {
	// Source is power.source: auto (every meter found, the estimator when
	// none measures), rapl, or estimator.
	Source string
	// SysfsRoot and ProcfsRoot are path.sysfs and path.procfs ("/sys",
	// "/proc" when empty).
	SysfsRoot, ProcfsRoot string
	// IPMI is power.ipmi: auto or off (both IPMI rows read it).
	IPMI string
	// Interval and Timeout are power.meter-interval and
	// power.meter-timeout: how often slow meters (BMCs, hwmon) are read in
	// the background and how long one read may take.
	Interval, Timeout time.Duration
	// MinWattsPerCPU and MaxWattsPerCPU are
	// power.estimator.min-watts-per-cpu and max-watts-per-cpu; 0 takes the
	// built-in table's figure.
	MinWattsPerCPU, MaxWattsPerCPU float64
	// MaxWatts is power.max-watts: per-zone ceilings (watts per socket for
	// package, core, uncore and dram, per device for gpu, per node for psys
	// and platform); zones not set use power.DefaultMaxWatts.
	MaxWatts power.MaxWatts
	// HostShare is power.host-share.path: in a guest, where its host's
	// share is mounted (empty: never look); HostShareStaleness is
	// power.host-share.staleness.
	HostShare          string
	HostShareStaleness time.Duration
	// HostShareVsock is power.host-share.vsock-port: in a guest, the
	// host's vsock port that serves its share (context id 2), read
	// instead of power.host-share.path; 0: read the directory.
	HostShareVsock int

	// CPUs is the number of online CPUs, read once by the exporter; 0
	// reads it from SysfsRoot.
	CPUs int
	// GPUDevices are the PCI addresses of the devices the GPU stage reads
	// itself (gpu.nvml, gpu.sysfs), in the order of its zones (socket 0,
	// 1, …). Another meter's GPU zone of such a device (a hwmon amdgpu,
	// i915 or xe chip; a Cray pm_counters accelN zone, N < len) is left
	// out, so no GPU feeds workloads twice; the GPU zones of devices the
	// stage cannot read stay, numbered after the stage's.
	GPUDevices []string
	// GPUAccels are those devices' accelerator numbers (NVML's index, a
	// DRM GPU's place among the node's GPUs), in the same order: Cray
	// pm_counters' accelN is the node's Nth GPU, whichever the stage
	// could open. Without them, the stage's devices are taken to be
	// accel0 … accel(len−1).
	GPUAccels []int
	// GPUPending: a GPU source is open but down (NVML failing at start),
	// so the stage may read more devices later. The meters' GPU zones are
	// then numbered after every accelerator the node has, never where the
	// stage's later zones will be; which of them the meters stop
	// reporting follows the stage (internal/compose).
	GPUPending bool
	// APUs are the PCI addresses of AMD APUs, whose amdgpu power sensor
	// reports the whole socket, CPU included: never a GPU zone, since the
	// package zone counts that energy already.
	APUs []string
	// VerdictDir, when set, keeps for the rest of the boot that the power
	// PMU's counters did not advance (advance.go), so that a later
	// process skips the check's 250 ms; `wattrace measure` sets it, the
	// exporter, which checks once, does not.
	VerdictDir string
	// Retry tunes the background retries of configured meters that fail
	// at start (5s doubling to 5m when zero); its Log is set by Open.
	Retry power.RetryOptions

	// rows holds each row's own settings by row name (Declare fills it;
	// a row missing here gets its zero settings, defaults filled).
	rows map[string]any

	// For tests: IPMIDevices overrides ipmi.DevicePaths, LookPath finds
	// IPMI tools and capmc (exec.LookPath when nil).
	IPMIDevices []string
	LookPath    func(string) (string, error)
	// openIPMI opens the OpenIPMI device (ipmi.Open); tests fake it.
	openIPMI func(paths []string) (ipmi.Conn, string, error)
}

// Sources and IPMIModes are the allowed values of power.source and
// power.ipmi.
var (
	Sources   = []string{"auto", "rapl", "estimator"}
	IPMIModes = []string{"auto", "off"}
)

// Declare declares every power.* setting Open reads, bound to c: the
// shared ones here, each row's own through its row. Every check lives in
// its declaration, so the configuration validates each setting once, with
// the key in the error.
func (c *Config) Declare(s *setting.Set) {
	s.Enum(&c.Source, KeySource, "auto", Sources, "Energy source: auto (every meter found: RAPL, pm_counters, Redfish, IPMI, hwmon; the estimator when none measures), rapl (RAPL only), or estimator.")
	s.Float(&c.MinWattsPerCPU, KeyMinWattsPerCPU, 0, "Estimator: watts per CPU at idle. 0 = from the built-in CPU model table.").Checked(wattsPerCPU(KeyMinWattsPerCPU, &c.MinWattsPerCPU))
	s.Float(&c.MaxWattsPerCPU, KeyMaxWattsPerCPU, 0, "Estimator: watts per CPU at full load. 0 = from the built-in CPU model table.").Checked(wattsPerCPU(KeyMaxWattsPerCPU, &c.MaxWattsPerCPU)).Checked(func() error {
		if lo, hi := c.MinWattsPerCPU, c.MaxWattsPerCPU; lo > 0 && hi > 0 && hi < lo {
			return setting.Invalid(KeyMaxWattsPerCPU, hi, fmt.Sprintf("must be >= %s (%g)", KeyMinWattsPerCPU, lo))
		}
		return nil
	})
	s.Enum(&c.IPMI, KeyIPMI, "auto", IPMIModes, "Read node power over IPMI DCMI (/dev/ipmi0, else ipmi-dcmi, ipmitool or ipmiutil): auto or off.")
	s.Duration(&c.Interval, KeyMeterInterval, defaultMeterPeriod, "How often slow meters (BMCs, hwmon) and amdgpu GPUs' power are read in the background.")
	s.Duration(&c.Timeout, KeyMeterTimeout, defaultMeterWait, "Longest wait for one slow-meter read, and for the meter's and the GPUs' reads in each step of the stats loop (at most stats.interval); a read that overruns is cut off, never credited, and counted as a rejected reading (reason late); a late meter keeps its last value, visibly stale.")
	s.Map((*map[string]float64)(&c.MaxWatts), KeyMaxWatts, "Ceilings on plausible power per zone, e.g. package=400,platform=3000: watts per socket for package, core, uncore, dram; per device for gpu; per node for psys, platform. A reading implying more is rejected and counted. Unset zones: package, core, uncore 1000, dram 500, gpu 2000, psys 2000, platform 20000.").Checked(func() error {
		return power.ValidateMaxWatts(KeyMaxWatts, c.MaxWatts)
	})
	s.String(&c.HostShare, KeyHostSharePath, hostshare.DefaultMount, "In a guest: where the host's share is mounted. With power.source=auto a share found there is the node's meter (source host:<host name>, method measured). Empty: never look.").Checked(func() error {
		if c.HostShare != "" && !filepath.IsAbs(c.HostShare) {
			return setting.Invalid(KeyHostSharePath, c.HostShare, "want an absolute path")
		}
		return nil
	})
	s.Int(&c.HostShareVsock, KeyHostShareVsock, 0, "In a guest whose host cannot share a directory: read the host's share over vsock from this port on the host (context id 2, the host's guests.share.vsock-port) instead of "+KeyHostSharePath+"; with power.source=auto it is then the node's meter. 0: off.", 0, "want a port, 0 (off) to "+strconv.FormatUint(uint64(hostshare.MaxVsockPort), 10)).Checked(func() error {
		if uint64(c.HostShareVsock) > uint64(hostshare.MaxVsockPort) {
			return setting.Invalid(KeyHostShareVsock, c.HostShareVsock, "want a port, 0 (off) to "+strconv.FormatUint(uint64(hostshare.MaxVsockPort), 10))
		}
		return nil
	})
	s.Duration(&c.HostShareStaleness, KeyHostShareStale, hostshare.DefaultStaleness, "In a guest: how long the host's share may go without an update before the host source is reported down and the estimator stands in (method estimated); three of the host's write intervals (the share's interval_seconds) when longer.")
	if c.rows == nil {
		c.rows = map[string]any{}
	}
	for _, row := range Meters {
		if row.declare != nil {
			c.rows[row.Name] = row.declare(s, c.rows[row.Name])
		}
	}
}

// Check runs every declared check on c as it is (the configuration's
// validation); Validate is for a Config built in code.
func (c *Config) Check() error {
	s := &setting.Set{}
	c.Declare(s)
	return s.Check()
}

// Own returns a row's settings as declared and decoded (a pointer to the
// row's settings type), nil for a row without any.
func (c *Config) Own(row string) any { return c.rows[row] }

// wattsPerCPU checks an estimator figure: finite, in [0,
// curves.MaxWattsPerVCPU]; 0 takes the table's.
func wattsPerCPU(key string, v *float64) func() error {
	return func() error {
		if math.IsNaN(*v) || math.IsInf(*v, 0) || *v < 0 || *v > curves.MaxWattsPerVCPU {
			return setting.Invalid(key, *v, fmt.Sprintf("want a finite number of watts in [0, %d] (0 = from the CPU model table)", curves.MaxWattsPerVCPU))
		}
		return nil
	}
}

// Validate checks a Config built in code: settings left at a zero value
// their checks refuse take their defaults first. Every error names its key.
func (c Config) Validate() error {
	_, err := c.settled()
	return err
}

// settled returns c with its unset settings defaulted, and the checks'
// verdict.
func (c Config) settled() (Config, error) {
	// Rows' settings are pointers shared with the caller's Config; copy
	// the map so that defaults filled here stay here.
	rows := c.rows
	c.rows = map[string]any{}
	for _, row := range Meters {
		if row.declare != nil {
			c.rows[row.Name] = row.copy(rows[row.Name])
		}
	}
	s := &setting.Set{}
	c.Declare(s)
	s.FillUnset()
	return c, s.Check()
}

func (c Config) withDefaults() Config {
	if c.SysfsRoot == "" {
		c.SysfsRoot = "/sys"
	}
	if c.ProcfsRoot == "" {
		c.ProcfsRoot = "/proc"
	}
	if c.LookPath == nil {
		c.LookPath = exec.LookPath
	}
	if c.openIPMI == nil {
		c.openIPMI = func(paths []string) (ipmi.Conn, string, error) {
			d, err := ipmi.Open(paths...)
			if err != nil {
				return nil, "", err
			}
			return d, d.Path(), nil
		}
	}
	return c
}
