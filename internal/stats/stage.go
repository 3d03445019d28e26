package stats

import (
	"context"
	"time"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
)

// stage is one part of the loop's work, in a file of its own, owning its
// state. Step runs each phase over every stage, in the order of the list
// stages builds, before the next phase:
//
//   - begin, every step, before anything is read or credited: fix what is
//     in force for the whole interval (the carbon factor);
//   - absorb, when the accounting source was read: the consumers and what
//     each used (the ledger, probes, perf counts, GPUs);
//   - split, every step: the meter's zones divided among the consumers;
//   - settle, every step, once all energy is split: workloads summed from
//     their cgroups, what is owed to them paid;
//   - publish, every step: the stage's part of the snapshot (stages later
//     in the list may read and extend what earlier ones put there).
//
// A stage embeds phases and overrides the phases it takes part in. A stage
// that needs another gets it through its constructor, as a small view
// (consumers, workloadCredit, …), never by reaching into its fields.
type stage interface {
	begin(iv *interval)
	absorb(iv *interval)
	split(iv *interval)
	settle(iv *interval)
	publish(iv *interval, s *snapshot.Snapshot)
}

// phases is the no-op of every phase, for stages to embed.
type phases struct{}

func (phases) begin(*interval)                       {}
func (phases) absorb(*interval)                      {}
func (phases) split(*interval)                       {}
func (phases) settle(*interval)                      {}
func (phases) publish(*interval, *snapshot.Snapshot) {}

// interval is what Step knows of the interval it runs, handed to every
// phase.
type interval struct {
	// ctx is the step's: its deadline (Config.readTimeout) bounds every
	// read a stage makes of a source that may block (the meter, the GPUs).
	ctx context.Context
	now time.Time
	// dt is the interval's length, 0 on the baseline step.
	dt       time.Duration
	baseline bool
	// reading is the accounting source's reading, readErr its failure;
	// readAt is when it was taken (wall clock).
	reading reading.Usage
	readErr error
	readAt  time.Time
	// keepFactor: this step prices its energy at the factor fixed by the
	// previous one (the factor changed since; demand.go).
	keepFactor bool
	// cpuSeconds is the node's CPU time of the interval, set by the
	// ledger's absorb (0 when the source failed).
	cpuSeconds float64
	// gone are the zone series the node's zones left longer than the
	// retention ago, set by the zones' split: the consumers' and
	// workloads' series of them are not published, as an ended
	// workload's are not (nil when none).
	gone map[snapshot.ZoneSeries]bool
}

// credits gives energy to consumers and to workloads and tells the stages
// that follow every credited joule (creditWatcher: emissions prices it).
// The split and the GPU stage credit consumers through it, the roll-up
// workloads.
type credits struct {
	consumers []func(w *consumer, zone string, dynamicJ, idleJ float64)
	workloads []func(f *figures, zone string, dynamicJ, idleJ float64)
}

// creditWatcher is a stage told of every share of energy credited.
type creditWatcher interface {
	creditedConsumer(w *consumer, zone string, dynamicJ, idleJ float64)
	creditedWorkload(f *figures, zone string, dynamicJ, idleJ float64)
}

// consumer adds energy to a consumer's series s (the zone's node series
// it was split from) and tells the watchers.
func (c *credits) consumer(w *consumer, s snapshot.ZoneSeries, dynamicJ, idleJ float64) {
	w.f.Energy = w.f.Energy.Add(s, dynamicJ, idleJ)
	for _, fn := range c.consumers {
		fn(w, s.Zone, dynamicJ, idleJ)
	}
}

// workload adds energy to a workload's series s and tells the watchers.
func (c *credits) workload(f *figures, s snapshot.ZoneSeries, dynamicJ, idleJ float64) {
	f.Energy = f.Energy.Add(s, dynamicJ, idleJ)
	for _, fn := range c.workloads {
		fn(f, s.Zone, dynamicJ, idleJ)
	}
}

// watcher is a stage whose input may change between steps (the carbon
// factor): the on-demand loop polls changed every interval and, when it
// did, steps at once (keepFactor: the energy until then at the old input)
// and then lets the stage adopt the new one.
type watcher interface {
	changed() bool
	adopt()
}

// gapper is a stage that must be stepped at least every gap (GPUs: NVML
// keeps per-process samples for a while only).
type gapper interface {
	maxGap() time.Duration
}

// healthSource is a stage that also reports the health of what it reads
// (the ledger's CPU check); the health stage adds it to the snapshot.
type healthSource interface {
	healthSources() []any
}
