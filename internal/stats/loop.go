// Package stats runs the loop that reads the accounting source and the
// node's meter each interval, splits the node's energy among consumers
// (cgroups and processes) through the ratio model, rolls consumers up into
// workloads, and publishes immutable snapshots.
//
// Step runs the stages (stage.go) phase by phase, in the order of their
// list (stages.go), each in its own file and owning its own state: the
// ledger of consumers (ledger.go, retention.go), the optional probes and
// perf counts (probes.go, perf.go), the meter's zones (zones.go, idle.go)
// and their split (split.go), the sources' health (health.go), the roll-up
// into workloads (rollup.go), the GPUs (gpu.go) and the emissions
// (emissions.go). What consumers used in an interval is shares.go; their
// additive figures are figures.go.
package stats

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/model"
)

// Config configures the loop.
type Config struct {
	Interval  time.Duration
	Retention time.Duration
	// IdlePolicy is "none", "even" or "cpu".
	IdlePolicy string
	// VMIdleSplit is how, under IdlePolicy "even" on a host with VMs
	// (WithWorkloads resolving some cgroups to VMs), the idle energy is
	// split among the VMs: "even" (the default when empty), "vcpus" or
	// "memory" (vmidle.go).
	VMIdleSplit string
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
	// ReadTimeout is the longest a step waits for the meter's and the
	// GPUs' reads (deadline.go): a read that overruns it is cut off, not
	// credited and counted late. The exporter sets it from
	// power.meter-timeout; at most Interval, and Interval/2 when 0.
	ReadTimeout time.Duration
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
	src   Accounting
	meter Meter
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

	// stages are those on, in the order Step runs each phase over them
	// (stageList); watchers are those polled between steps (demand.go).
	stages   []stage
	watchers []watcher
	// credits is the stages' shared way to give energy (stage.go).
	credits *credits
}

// Option adds an optional part to the loop.
type Option func(*parts)

// New builds a loop. It fails on a configuration it can't honour, naming
// the key.
func New(cfg Config, src Accounting, meter Meter, res CgroupPaths, log *zap.Logger, opts ...Option) (*Loop, error) {
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
	switch cfg.VMIdleSplit {
	case "", vmSplitEven, vmSplitVCPUs, vmSplitMemory:
	default:
		return nil, fmt.Errorf("vm.idle-split: unknown value %q (allowed: even, vcpus, memory)", cfg.VMIdleSplit)
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
	if cfg.MaxGap < 0 {
		return nil, fmt.Errorf("stats.max-gap must not be negative, got %v", cfg.MaxGap)
	}
	d := &deps{cfg: cfg, policy: policy, src: src, meter: meter, res: res, log: log,
		use: newShares(cfg.Sockets), credits: &credits{}}
	for _, o := range opts {
		o(&d.opts)
	}
	stages, err := buildStages(d)
	if err != nil {
		return nil, err
	}
	l := &Loop{
		cfg: cfg, src: src, meter: meter, log: log,
		stages: stages, credits: d.credits,
		reqs:    make(chan request),
		asked:   make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	for _, s := range stages {
		if w, ok := s.(watcher); ok {
			l.watchers = append(l.watchers, w)
		}
	}
	l.gap = l.backgroundGap()
	return l, nil
}

// WithCgroupNames names the cgroup ids the resolver can no longer find
// (removed between two reads) from the paths they had when created
// (*bpfloader.CgroupNames), instead of "id:N" placeholders.
func WithCgroupNames(n CgroupPaths) Option {
	return func(o *parts) { o.names = n }
}

// HasGPUs reports whether the GPU stage runs (its sources' health joins
// the meters' health).
func (l *Loop) HasGPUs() bool {
	for _, s := range l.stages {
		if _, ok := s.(*gpuStage); ok {
			return true
		}
	}
	return false
}

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
	l.step(ctx, time.Now())
	first := time.NewTimer(min(time.Second, l.cfg.Interval))
	defer first.Stop()
	select {
	case <-ctx.Done():
		return nil
	case now := <-first.C:
		l.step(ctx, now)
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
			l.step(ctx, now)
		case r := <-l.reqs:
			l.serve(ctx, r)
		}
	}
}

// Step runs one interval ending at now: the first call only takes the
// baseline. A failing source or meter is logged and never stops the
// other: the counters they keep are cumulative, so what a failed read
// missed is counted by the next good one. Reads that may block are
// bounded by the step's read timeout (deadline.go).
func (l *Loop) Step(now time.Time) { l.step(context.Background(), now) }

// step is Step with the caller's context, whose cancellation also ends
// the step's reads.
func (l *Loop) step(parent context.Context, now time.Time) {
	// Counted when done, so that a caller who sees the count also sees
	// the snapshot the step published.
	defer l.steps.Add(1)
	iv := &interval{now: now, keepFactor: l.keepFactor}
	iv.reading, iv.readErr = l.src.Read()
	iv.readAt = time.Now()
	// The deadline runs from the accounting's read (which may take long
	// on a busy node with procfs, and is not one to cut off): the
	// meter's and the GPUs' reads share it.
	ctx, cancel := context.WithTimeout(parent, l.cfg.readTimeout())
	defer cancel()
	iv.ctx = ctx
	if iv.readErr != nil {
		l.log.Warn("read accounting source", zap.String("mode", l.src.Mode()), zap.Error(iv.readErr))
	}
	iv.baseline = !l.started
	if iv.baseline {
		l.started, l.last = true, now
	} else {
		iv.dt = now.Sub(l.last)
		l.last = now
	}
	// Every read is counted, even one that came too soon to step.
	for _, s := range l.stages {
		s.begin(iv)
	}
	if !iv.baseline {
		if iv.dt <= 0 {
			return
		}
		l.intervals++
	}
	// 1. Consumers and what each used.
	if iv.readErr == nil {
		for _, s := range l.stages {
			s.absorb(iv)
		}
	}
	// 2. The meter's zones, each split among the consumers.
	for _, s := range l.stages {
		s.split(iv)
	}
	// 3. Workloads, summed from their cgroups, and what is owed to them.
	for _, s := range l.stages {
		s.settle(iv)
	}
	l.publish(iv)
}

// publish builds an immutable snapshot from every stage, each copying its
// part (and dropping what is past retention).
func (l *Loop) publish(iv *interval) {
	s := &snapshot.Snapshot{
		Time:      iv.now,
		Interval:  l.cfg.Interval,
		Mode:      l.src.Mode(),
		Hierarchy: l.cfg.Hierarchy,
		Intervals: l.intervals,
	}
	for _, st := range l.stages {
		st.publish(iv, s)
	}
	l.snap.Store(s)
}
