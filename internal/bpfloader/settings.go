package bpfloader

import (
	"slices"
	"strings"

	"github.com/wattrace/wattrace/internal/setting"
)

// ProbeSettings are the probes' settings as configured: probe and counter
// names, which the exporter turns into ProbeOptions.
type ProbeSettings struct {
	// Disable is collector.probes.disable: probes not to load.
	Disable []string
	// Counters is collector.probes.counters: the perf counters read at
	// every context switch, by name (CounterByName); none by default.
	Counters []string
}

// Declare declares collector.probes.disable and collector.probes.counters,
// bound to p. Turning the probes on is the collector's own switch
// (collector.probes).
func (p *ProbeSettings) Declare(s *setting.Set) {
	// A misspelt name is refused at start-up whatever the accounting
	// mode: otherwise a procfs-mode node would ignore it until the day
	// it loads the probes.
	disable := s.Strings(&p.Disable, "collector.probes.disable", nil, "Probes not to load: "+strings.Join(ProbeNames(), ", ")+".")
	disable.Checked(func() error {
		for _, n := range p.Disable {
			if !slices.Contains(ProbeNames(), n) {
				return setting.Invalid("collector.probes.disable", n, "no such probe (known: "+strings.Join(ProbeNames(), ", ")+")")
			}
		}
		return nil
	})
	counters := s.Strings(&p.Counters, "collector.probes.counters", nil, "Perf counters read at every context switch: cycles, instructions, cache_misses, or cpu_clock (software stand-in). Off by default: reading one costs about 450 ns per context switch on every process (docs/performance.md); none opened means the counters program is not attached.")
	counters.Checked(func() error {
		for _, n := range p.Counters {
			if _, err := CounterByName(n); err != nil {
				return setting.Invalid("collector.probes.counters", n, err.Error())
			}
		}
		return nil
	})
}
