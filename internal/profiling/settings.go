package profiling

import (
	"fmt"

	"github.com/wattrace/wattrace/internal/setting"
)

// The collector.perf.* keys: which processes opt in and which events they
// are counted with. Turning the profiler on is the collector's own switch
// (collector.perf).
const (
	KeyEnvVar       = "collector.perf.env-var"
	KeyHardware     = "collector.perf.hardware-events"
	KeySoftware     = "collector.perf.software-events"
	KeyCache        = "collector.perf.cache-events"
	KeyMaxProcesses = "collector.perf.max-processes"
)

// Declare declares the collector.perf.* settings bound to c; ProcfsRoot,
// MaxFDs and Log are the exporter's to set.
func (c *Config) Declare(s *setting.Set) {
	s.Strings(&c.EnvVars, KeyEnvVar, []string{"WATTRACE_PROFILE"}, "Environment variables that opt a process in to profiling (any non-empty value). Repeatable.")
	s.Strings(&c.Hardware, KeyHardware, []string{"cpu_cycles", "instructions", "cache_references", "cache_misses", "branch_instructions", "branch_misses"}, "Hardware events for opted-in processes (unavailable ones are logged once and skipped).")
	s.Strings(&c.Software, KeySoftware, []string{"task_clock", "context_switches", "cpu_migrations", "page_faults"}, "Software events for opted-in processes.")
	s.Strings(&c.Cache, KeyCache, nil, "Cache events for opted-in processes, e.g. l1d_read_miss, ll_read_access.")
	s.Int(&c.MaxProcesses, KeyMaxProcesses, DefaultMaxProcesses, "Most processes profiled at once; more wait for a slot.", 0, fmt.Sprintf("must be >= 0 (0 = %d)", DefaultMaxProcesses))
}
