package main

import (
	"io"

	"github.com/wattrace/wattrace/internal/bpfloader"
	"github.com/wattrace/wattrace/internal/cgroupstats"
	"github.com/wattrace/wattrace/internal/collector"
	"github.com/wattrace/wattrace/internal/compose"
	"github.com/wattrace/wattrace/internal/gpu/node"
	"github.com/wattrace/wattrace/internal/guestshare"
	"github.com/wattrace/wattrace/internal/procfs"
	"github.com/wattrace/wattrace/internal/profiling"
	"github.com/wattrace/wattrace/internal/stats"
	"github.com/wattrace/wattrace/pkg/carbon"
	"github.com/wattrace/wattrace/pkg/cgroup"
	"github.com/wattrace/wattrace/pkg/power"
	"github.com/wattrace/wattrace/pkg/workload"
)

// The seams the parts (parts.go) are wired through, checked at compile
// time beside the wiring: each source is declared as the interface its
// consumer takes, which its own package cannot state without importing
// the consumer.
var (
	_ stats.Accounting = (*bpfloader.Accounting)(nil)
	_ stats.Accounting = (*procfs.Source)(nil)
	_ stats.Accounting = compose.UsageSource(nil)

	// The meter and its abilities are declared twice, where each is
	// consumed: by pkg/power (its wrappers forward them) and by the stats
	// loop, which asks for them by type assertion and so would silently
	// miss one whose declarations drifted apart.
	_ stats.Meter            = power.Meter(nil)
	_ stats.IdleModeler      = power.IdleModeler(nil)
	_ stats.ZoneEnder        = power.ZoneEnder(nil)
	_ stats.Advancer         = power.Advancer(nil)
	_ stats.EstimateReporter = power.EstimateReporter(nil)
	_ stats.ReadWithin       = power.ReadWithin(nil)
	_ stats.HealthReporter   = power.HealthReporter(nil)
	_ stats.CombinedMeter    = (*power.Combined)(nil)

	_ stats.CgroupPaths      = (*cgroup.Resolver)(nil)
	_ stats.CgroupPaths      = (*bpfloader.CgroupNames)(nil)
	_ stats.ProbeSource      = (*bpfloader.Probes)(nil)
	_ stats.Profiler         = (*profiling.Profiler)(nil)
	_ stats.WorkloadResolver = (*workload.Resolver)(nil)
	_ stats.ResourceReader   = (*cgroupstats.Reader)(nil)
	_ stats.GPUSource        = (*node.GPUs)(nil)
	_ stats.IntensitySource  = (*carbon.Chain)(nil)

	_ collector.SnapshotSource     = (*stats.Loop)(nil)
	_ collector.ProgramStatsSource = (*bpfloader.Accounting)(nil)
	_ collector.ProgramStatsSource = (*bpfloader.CgroupNames)(nil)
	_ collector.ProgramStatsSource = (*bpfloader.Probes)(nil)
	_ freshSource                  = (*stats.Loop)(nil)
	_ stepAheadSource              = (*stats.Loop)(nil)
	_ guestshare.Snapshots         = latest{}

	_ io.Closer = (*webServer)(nil)
	_ io.Closer = (*bpfloader.Accounting)(nil)
	_ io.Closer = (*bpfloader.CgroupNames)(nil)
	_ io.Closer = (*bpfloader.Probes)(nil)
	_ io.Closer = (*profiling.Profiler)(nil)
)
