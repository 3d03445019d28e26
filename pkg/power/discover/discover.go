// Package discover chooses, at start-up, the node's power meters among
// those present: CPU energy (powercap RAPL, else RAPL through perf), the
// whole node (Cray pm_counters, a configured Redfish BMC, the OpenIPMI
// device, an IPMI tool, ACPI power_meter) and GPUs (hwmon).
package discover

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/power/ipmi"
	"github.com/wattrace/wattrace/pkg/power/redfish"
)

// Options says where to look. The zero value (plus SysfsRoot) probes the
// local machine and leaves Redfish out.
type Options struct {
	SysfsRoot string // "/sys"
	// Redfish, when set, is the BMC to read (it is never guessed).
	Redfish *redfish.Config
	// IPMIDevices overrides ipmi.DevicePaths; NoIPMI skips IPMI entirely
	// (device and tools).
	IPMIDevices []string
	NoIPMI      bool
	// Interval and Timeout drive the slow meters (BMCs, hwmon power);
	// defaults 1s and 5s (the timeout is capped at the interval).
	Interval time.Duration
	Timeout  time.Duration
	// LookPath finds IPMI tools; exec.LookPath when nil.
	LookPath func(string) (string, error)
}

// Discover returns the combined meter (a *power.Combined, zones of earlier
// meters win) and one log line per meter considered, saying what was found
// and why it was or was not used. It fails only when nothing measures.
//
// Order, best first:
//   - CPU zones: powercap RAPL; RAPL through perf when powercap is absent.
//   - platform: pm_counters (an energy counter, 10 Hz) > Redfish (energy
//     where the BMC has a counter) > OpenIPMI DCMI > an IPMI tool > ACPI
//     power_meter. Only the best one is used, so the platform zone has one
//     source.
//   - GPU zones: pm_counters accelerators, else hwmon GPU chips.
func Discover(ctx context.Context, o Options) (power.Meter, []string, error) {
	if o.SysfsRoot == "" {
		o.SysfsRoot = "/sys"
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	var meters []power.Meter
	var log []string
	note := func(format string, a ...any) { log = append(log, fmt.Sprintf(format, a...)) }

	// CPU.
	if r, err := power.NewRAPL(o.SysfsRoot); err == nil {
		if _, err := r.Read(); err == nil {
			meters = append(meters, r)
			note("rapl: powercap counters readable: used for package, core, uncore, dram, psys")
		} else {
			note("rapl: powercap present but unreadable: %v", err)
		}
	} else {
		note("rapl: %v", err)
	}
	if len(meters) == 0 {
		if p, err := power.NewPerfRAPL(o.SysfsRoot); err == nil {
			if _, err := p.Read(); err == nil {
				meters = append(meters, p)
				note("rapl-perf: power PMU opened: used for CPU zones (powercap unusable)")
			} else {
				_ = p.Close()
				note("rapl-perf: %v", err)
			}
		} else {
			note("rapl-perf: %v", err)
		}
	} else {
		note("rapl-perf: not used: powercap RAPL already covers the CPU zones")
	}

	// Platform, best first; the first that gives a reading wins.
	havePlatform, haveGPU := false, false
	if pm, err := power.NewPMCounters(o.SysfsRoot); err == nil {
		if _, err := pm.Read(); err == nil {
			meters = append(meters, pm)
			havePlatform, haveGPU = true, true
			note("pm_counters: used for platform and accelerators (measured energy counters); its cpu and memory counters yield to RAPL's per-socket zones when RAPL is used")
		} else {
			note("pm_counters: present but unreadable: %v", err)
		}
	} else {
		note("pm_counters: %v", err)
	}

	try := func(label string, r power.PowerReader) bool {
		c := power.NewCached(r, o.Interval, o.Timeout)
		wctx, cancel := context.WithTimeout(ctx, o.Timeout+o.Interval)
		err := c.WaitFirst(wctx)
		cancel()
		if err != nil {
			_ = c.Close()
			note("%s: no reading: %v", label, err)
			return false
		}
		meters = append(meters, c)
		note("%s: used", label)
		return true
	}

	if o.Redfish != nil {
		switch {
		case havePlatform:
			note("redfish: configured but not used: pm_counters already gives the platform")
		default:
			m, err := redfish.NewMeter(*o.Redfish)
			if err != nil {
				note("redfish: %v", err)
			} else if try("redfish "+m.Client().BMC(), m) {
				havePlatform = true
				if s := m.Source(); s != "" {
					log[len(log)-1] += " (" + s + ")"
				}
			}
		}
	} else {
		note("redfish: not configured")
	}

	if !o.NoIPMI && !havePlatform {
		if dev, err := ipmi.Open(o.IPMIDevices...); err == nil {
			havePlatform = try("ipmi "+dev.Path()+" (DCMI)", ipmi.NewDCMIMeter(dev))
		} else {
			note("ipmi: %v", err)
		}
		for _, t := range ipmi.Tools {
			if havePlatform {
				break
			}
			p, err := o.LookPath(t.Name)
			if err != nil {
				note("ipmi %s: not found on PATH", t.Name)
				continue
			}
			tm, err := ipmi.NewToolMeter(t, p)
			if err == nil {
				havePlatform = try("ipmi "+p, tm)
			}
		}
	}

	if h, err := power.NewHwmon(o.SysfsRoot, nil); err == nil {
		zones := power.DefaultHwmonZones()
		if havePlatform || haveGPU {
			// Keep only what is still missing.
			if havePlatform {
				delete(zones, "power_meter")
			}
			if haveGPU {
				for k, z := range zones {
					if z == power.ZoneGPU {
						delete(zones, k)
					}
				}
			}
			h, err = power.NewHwmon(o.SysfsRoot, zones)
		}
		_, pm := zones["power_meter"]
		if err == nil && try("hwmon", h) {
			havePlatform = havePlatform || pm
		} else if err != nil {
			note("hwmon: nothing more to add: %v", err)
		}
	} else {
		note("hwmon: %v", err)
	}

	if len(meters) == 0 {
		return nil, log, errors.New("no power meter found (see the log lines for what was tried)")
	}
	if !havePlatform {
		note("platform: no whole-node meter; configure redfish or install an IPMI tool to measure the node, not just its CPUs")
	}
	return power.Combine(meters...), log, nil
}
