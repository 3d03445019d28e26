package bpfloader

import (
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
	s.Strings(&p.Disable, "collector.probes.disable", nil, "Probes not to load: "+strings.Join(ProbeNames(), ", ")+".")
	s.Strings(&p.Counters, "collector.probes.counters", nil, "Perf counters read at every context switch: cycles, instructions, cache_misses, or cpu_clock (software stand-in). Off by default: reading one costs about 450 ns per context switch on every process (docs/performance.md); none opened means the counters program is not attached.")
}
