// Package stats runs the loop that reads the accounting source and the
// node's meter each interval, splits the node's energy among consumers
// (cgroups and processes) through the ratio model, rolls consumers up into
// workloads, and publishes immutable snapshots.
//
// Step runs the stages in order, each in its own file and owning its own
// state: the ledger of consumers (ledger.go, retention.go), what they used
// (shares.go), the optional probes and perf counts (probes.go, perf.go),
// the meter's zones (zones.go, idle.go) and their split (split.go), the
// roll-up into workloads (rollup.go) and the sources' health (health.go).
package stats

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/snapshot"
	"github.com/wattrace/wattrace/pkg/sourcehealth"
	"github.com/wattrace/wattrace/pkg/usage"
)

// Config configures the loop.
type Config struct {
	Interval  time.Duration
	Retention time.Duration
	// IdlePolicy is "none", "even" or "cpu".
	IdlePolicy string
	// IdleWatts gives a zone's idle power by zone name; zones without an
	// entry learn it as the lowest power seen at low utilization.
	IdleWatts map[string]float64
	// Sockets maps each CPU to its socket; empty means one socket.
	Sockets map[int]int
	// CPUs is the number of online CPUs; 0 means runtime.NumCPU().
	CPUs int
	// Hierarchy names the key hierarchy, for the snapshot.
	Hierarchy string
	// UsageMetric names, per zone, what its dynamic energy is split by:
	// "cpu_time" (the default) or a perf counter the probes read; a zone
	// whose counter is not read falls back to CPU time.
	UsageMetric map[string]string
	// OnDemand steps the loop when someone asks for figures older than
	// Interval (Fresh: a scrape) and otherwise only as often as a source
	// needs (Gap, demand.go); false steps it every Interval.
	OnDemand bool
	// MaxGap bounds the time between steps in on-demand mode; 0 means
	// DefaultMaxGap. Sources may need less (Gap).
	MaxGap time.Duration
	// EndedProcesses is how many ended processes stay in snapshots for
	// the retention: the N with the most energy, as many as the process
	// families export (collector.process.top); 0 keeps every one, < 0
	// none (nothing exports processes).
	EndedProcesses int
}

// Loop is the stats loop. Step and Run must be called from one goroutine;
// Snapshot may be called from any.
type Loop struct {
	cfg   Config
	src   usage.Source
	meter snapshot.Meter
	log   *zap.Logger
	snap  atomic.Pointer[snapshot.Snapshot]

	started   bool
	last      time.Time
	intervals uint64
	steps     atomic.Uint64

	// Stepping on demand (demand.go): requests from Fresh, closed when
	// Run returns; gap is the background cadence; keepFactor prices a
	// step at the factor of the previous one.
	reqs       chan request
	asked      chan struct{}
	pace       pace
	ahead      func(*snapshot.Snapshot)
	running    atomic.Bool
	stopped    chan struct{}
	gap        time.Duration
	keepFactor bool

	// The stages, in the order Step runs them; the optional ones are nil
	// when off.
	ledger    *ledger
	shares    *shares
	probes    *probes
	perf      *perf
	zones     *zones
	split     *split
	rollup    *rollup
	gpu       *gpuStage      // GPU devices as zones; nil without GPUs
	resources ResourceReader // handed to rollup
	health    *health
	emissions *emissions
}

// Option adds an optional part to the loop.
type Option func(*Loop)

// New builds a loop. It fails on a configuration it can't honour, naming
// the key.
func New(cfg Config, src usage.Source, meter snapshot.Meter, res CgroupPaths, log *zap.Logger, opts ...Option) (*Loop, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("stats.interval must be positive, got %v", cfg.Interval)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("stats.retention must not be negative, got %v", cfg.Retention)
	}
	policy, err := model.ParseIdlePolicy(cfg.IdlePolicy)
	if err != nil {
		return nil, fmt.Errorf("power.idle-policy: %w", err)
	}
	for z, w := range cfg.IdleWatts {
		if _, err := model.NewConfiguredIdle(w); err != nil {
			return nil, fmt.Errorf("power.idle-watts %s: %w", z, err)
		}
	}
	if src == nil || meter == nil {
		return nil, errors.New("stats loop needs an accounting source and a meter")
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = runtime.NumCPU()
	}
	l := &Loop{
		cfg: cfg, src: src, meter: meter, log: log,
		ledger:  newLedger(res, cfg.Retention),
		shares:  newShares(cfg.Sockets),
		zones:   newZones(meter, &idleModels{watts: cfg.IdleWatts, meter: meter}, log),
		reqs:    make(chan request),
		asked:   make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	if cfg.MaxGap < 0 {
		return nil, fmt.Errorf("stats.max-gap must not be negative, got %v", cfg.MaxGap)
	}
	l.split = newSplit(policy, l.shares, cfg.UsageMetric, log)
	switch {
	case cfg.EndedProcesses > 0:
		l.ledger.endedKept = cfg.EndedProcesses
	case cfg.EndedProcesses < 0:
		l.ledger.endedKept = 0
	}
	for _, o := range opts {
		o(l)
	}
	var probeSrc any
	if l.probes != nil {
		probeSrc = l.probes.src
		l.split.counters = l.probes.src.Counters
		l.ledger.trackGone = true
	}
	if l.rollup != nil {
		l.rollup.log = log
		if l.resources != nil {
			l.rollup.resources = newResourceCache(l.resources)
			l.rollup.resources.log = log
		}
	}
	if l.emissions != nil {
		l.split.credited = append(l.split.credited, l.emissions.credit)
	}
	if l.gpu != nil {
		if err := l.gpu.cfg.validate(); err != nil {
			return nil, err
		}
		l.gpu.credited = &l.split.credited
		l.gpu.emissions = l.emissions
	}
	sources := []any{src, probeSrc}
	if l.resources != nil {
		sources = append(sources, l.resources) // cgroupstats reports its health
	}
	if _, ok := src.(sourcehealth.Reporter); !ok {
		// A source that validates its counters reports its own health
		// (procfs); the BPF maps' counters are validated here.
		l.ledger.check = newCPUCheck(src.Mode(), cfg.CPUs, log)
		sources = append(sources, l.ledger.check)
	}
	l.health = newHealth(meter, log, sources...)
	l.gap = l.backgroundGap()
	return l, nil
}

// WithCgroupNames names the cgroup ids the resolver can no longer find
// (removed between two reads) from the paths they had when created
// (*bpfloader.CgroupNames), instead of "id:N" placeholders.
func WithCgroupNames(n CgroupPaths) Option {
	return func(l *Loop) { l.ledger.names = n }
}

// HasGPUs reports whether the GPU stage runs (its sources' health joins
// the meters' health).
func (l *Loop) HasGPUs() bool { return l.gpu != nil }

// Snapshot returns the latest snapshot, nil before the first interval.
func (l *Loop) Snapshot() *snapshot.Snapshot { return l.snap.Load() }

// Run steps the loop until ctx is done. The first step only takes a
// baseline; the first interval follows a second later so that a fresh
// exporter has figures quickly. Then, on demand (Config.OnDemand), a step
// runs when Fresh finds the snapshot too old and at least every Gap;
// otherwise one runs each Interval (and Fresh still steps when asked).
func (l *Loop) Run(ctx context.Context) error {
	l.running.Store(true)
	defer close(l.stopped)
	l.Step(time.Now())
	first := time.NewTimer(min(time.Second, l.cfg.Interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return nil
	case now := <-first.C:
		l.Step(now)
	}
	if l.cfg.OnDemand {
		l.runOnDemand(ctx)
		return nil
	}
	t := time.NewTicker(l.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			l.Step(now)
		case r := <-l.reqs:
			l.serve(r)
		}
	}
}

// Step runs one interval ending at now: the first call only takes the
// baseline. A failing source or meter is logged and never stops the
// other: the counters they keep are cumulative, so what a failed read
// missed is counted by the next good one.
func (l *Loop) Step(now time.Time) {
	// Counted when done, so that a caller who sees the count also sees
	// the snapshot the step published.
	defer l.steps.Add(1)
	reading, srcErr := l.src.Read()
	readAt := time.Now()
	if srcErr != nil {
		l.log.Warn("read accounting source", zap.String("mode", l.src.Mode()), zap.Error(srcErr))
	}
	if l.ledger.check != nil {
		l.ledger.check.read(srcErr)
	}
	baseline := !l.started
	var dt time.Duration
	if baseline {
		l.started, l.last = true, now
	} else {
		dt = now.Sub(l.last)
		l.last = now
		if dt <= 0 {
			return
		}
		l.intervals++
	}

	// The carbon intensity in force for all of this interval's energy,
	// the GPUs' (credited in part 1) and the meter's zones' alike.
	if l.emissions != nil && !l.keepFactor {
		l.emissions.begin()
	}
	// 1. Consumers and what each used.
	var cpuSec float64
	if srcErr == nil {
		if l.ledger.check != nil {
			l.ledger.check.advance(now, readAt, baseline)
		}
		cpuSec = l.ledger.absorb(reading, now, baseline, l.shares)
		if l.probes != nil {
			l.probes.absorb(l.ledger, l.shares, deadProcs(reading), l.split.byCounters(), l.log)
		}
		if l.perf != nil {
			l.perf.absorb(l.ledger, reading)
		}
		if l.gpu != nil {
			var ids WorkloadResolver
			if l.rollup != nil {
				ids = l.rollup.ids
			}
			l.gpu.absorb(l.ledger, ids, now, dt)
			if l.emissions != nil {
				l.emissions.gpus(l.gpu)
			}
		}
	} else {
		l.shares.clear()
	}
	// 2. The meter's zones, each split among the consumers.
	var util float64
	if !baseline {
		util = cpuSec / (dt.Seconds() * float64(l.cfg.CPUs))
	}
	if a, ok := l.meter.(snapshot.Advancer); ok {
		a.Advance(util, dt)
	}
	l.zones.read(dt, func(z *zoneState, dE float64) { l.split.zone(z, dE, dt, util) })
	if l.emissions != nil {
		l.emissions.zones(l.zones)
	}
	// 3. Workloads, summed from their cgroups.
	if l.rollup != nil {
		l.rollup.add(l.ledger, now)
	}
	if l.gpu != nil {
		l.gpu.payHolders(l.rollup)
	}
	l.publish(now)
}

// publish builds an immutable snapshot from every stage and drops what is
// past retention.
func (l *Loop) publish(now time.Time) {
	s := &snapshot.Snapshot{
		Time:      now,
		Interval:  l.cfg.Interval,
		Mode:      l.src.Mode(),
		Hierarchy: l.cfg.Hierarchy,
		Intervals: l.intervals,
	}
	l.zones.publish(s)
	l.ledger.publish(s, now)
	if l.rollup != nil {
		l.rollup.publish(s, now, l.cfg.Retention)
	}
	if l.probes != nil {
		l.probes.publish(s)
	}
	if l.perf != nil {
		l.perf.publish(s)
	}
	l.health.publish(s)
	if l.gpu != nil {
		l.gpu.publish(s, now, l.cfg.Retention)
	}
	if l.emissions != nil {
		// After every stage that publishes zones (the GPUs' included):
		// it prices them.
		l.emissions.publish(s)
	}
	l.snap.Store(s)
}
