package stats

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/wattrace/wattrace/internal/setting"
	"github.com/wattrace/wattrace/pkg/model"
)

// The settings the loop reads, declared beside it: stats.*, the idle
// model and the split (power.idle-*, power.usage-metric), and how a
// host's idle energy is split among its VMs (vm.idle-split).
const (
	KeyInterval    = "stats.interval"
	KeyOnDemand    = "stats.on-demand"
	KeyMaxGap      = "stats.max-gap"
	KeyRetention   = "stats.retention"
	KeyIdleWatts   = "power.idle-watts"
	KeyIdlePolicy  = "power.idle-policy"
	KeyUsageMetric = "power.usage-metric"
	KeyVMIdleSplit = "vm.idle-split"
)

// Allowed values of power.idle-policy, power.usage-metric's metrics and
// vm.idle-split, in the order errors and help list them.
var (
	IdlePolicies = []string{string(model.IdleNone), string(model.IdleEven), string(model.IdleShare)}
	UsageMetrics = []string{"cpu_time", "cycles", "instructions", "cache_misses", "cpu_clock"}
	VMIdleSplits = []string{vmSplitEven, vmSplitVCPUs, vmSplitMemory}
)

// Declare declares the settings the loop reads, bound to c's fields.
// zones are the zone names power.idle-watts and power.usage-metric may
// name (the meters' zones, which the loop does not import). Sockets, CPUs,
// Hierarchy and EndedProcesses are learnt at start-up, not set.
func (c *Config) Declare(s *setting.Set, zones []string) {
	s.Duration(&c.Interval, KeyInterval, 5*time.Second, "Accounting interval: a scrape's figures are at most this old. With stats.on-demand a scrape that finds them older steps the loop; without it the loop steps every interval.")
	s.Bool(&c.OnDemand, KeyOnDemand, true, "Step the loop when a scrape (or another consumer) asks for figures older than stats.interval, and otherwise only every stats.max-gap or as often as a source needs (a wrapping RAPL counter, GPU sampling, a carbon-intensity change). Totals are the same: every counter read is cumulative.")
	s.Duration(&c.MaxGap, KeyMaxGap, DefaultMaxGap, "With stats.on-demand, the longest the loop goes without a step when nobody asks; bounds how many ended processes the BPF exit maps must hold between reads. At least stats.interval.").Checked(func() error {
		if c.MaxGap > 0 && c.MaxGap < c.Interval {
			return setting.Invalid(KeyMaxGap, c.MaxGap, fmt.Sprintf("must be at least %s (%v)", KeyInterval, c.Interval))
		}
		return nil
	})
	s.Duration(&c.Retention, KeyRetention, 5*time.Minute, "How long terminated cgroups and processes stay exported, so the last scrape sees their final totals.")
	s.Map(&c.IdleWatts, KeyIdleWatts, "Fixed idle power per zone, e.g. package=10,dram=2. Zones not listed learn idle power from the minimum seen at low utilization.").Checked(func() error {
		errs := knownZones(KeyIdleWatts, setting.SortedKeys(c.IdleWatts), zones)
		for _, z := range setting.SortedKeys(c.IdleWatts) {
			if w := c.IdleWatts[z]; w < 0 {
				errs = append(errs, setting.Invalid(KeyIdleWatts+"."+z, w, "must be >= 0"))
			}
		}
		return errors.Join(errs...)
	})
	s.Enum(&c.IdlePolicy, KeyIdlePolicy, string(model.IdleNone), IdlePolicies, "How idle energy is attributed to workloads: none (kept at node level), even (split evenly among active workloads), cpu (by CPU time).")
	setting.Parsed(s, &c.UsageMetric, KeyUsageMetric, "", "What each zone's dynamic energy is split by, e.g. package=instructions,dram=cache_misses: cpu_time (default), or a perf counter from collector.probes.counters (cycles, instructions, cache_misses, cpu_clock); zones whose counter is unavailable use cpu_time.", parseUsageMetric).Checked(func() error {
		return errors.Join(knownZones(KeyUsageMetric, setting.SortedKeys(c.UsageMetric), zones)...)
	})
	s.Enum(&c.VMIdleSplit, KeyVMIdleSplit, vmSplitEven, VMIdleSplits, "On a host with VMs and power.idle-policy=even: the idle energy is split among the VMs that exist (busy or not, host daemons none): even (one share per VM), vcpus (by the vCPUs libvirt's domain XML allocates) or memory (by its memory); a VM whose allocation is not known makes the interval's split even, with a warning.")
}

// knownZones reports each of names that is not one of zones.
func knownZones(key string, names, zones []string) []error {
	var errs []error
	for _, z := range names {
		if !slices.Contains(zones, z) {
			errs = append(errs, fmt.Errorf("invalid zone %q in %s: allowed %s", z, key, strings.Join(zones, ", ")))
		}
	}
	return errs
}

// parseUsageMetric reads zone=metric pairs such as package=cycles.
func parseUsageMetric(val string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(val, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		zone, metric, ok := strings.Cut(item, "=")
		zone, metric = strings.TrimSpace(zone), strings.TrimSpace(metric)
		if !ok || zone == "" || !slices.Contains(UsageMetrics, metric) {
			return nil, errors.New("want zone=metric pairs such as package=instructions, metric one of " + strings.Join(UsageMetrics, ", "))
		}
		out[zone] = metric
	}
	return out, nil
}
