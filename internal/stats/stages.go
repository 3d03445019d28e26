package stats

import (
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

// stageList is the loop's stages, in the order Step runs each phase over
// them: the one place where the stages are listed. A constructor returns
// nil when its stage is off (an option not given). Adding a stage is its
// file (the type, its phases, its constructor) and its line here.
//
// The order matters where two stages share a phase: the ledger first (the
// others find consumers through it); the roll-up before the GPUs (holders
// are paid to the workloads of this interval); zones and health before the
// GPUs (whose publish appends their zones and health to theirs); emissions
// last (it prices every zone published before it).
func stageList() []func(d *deps) (stage, error) {
	return []func(d *deps) (stage, error){
		makeLedger,    // consumers, their deltas (ledger.go, retention.go)
		makeProbes,    // kernel probes' counters (probes.go)
		makePerf,      // opted-in processes' perf counts (perf.go)
		makeZones,     // the meter's zones, split among consumers (zones.go, split.go)
		makeHealth,    // the sources' health (health.go)
		makeRollup,    // cgroups into workloads (rollup.go)
		makeGPUs,      // GPUs as zones, holders paid (gpu.go)
		makeEmissions, // grams of every credited joule and zone (emissions.go)
	}
}

// parts is what the options asked for; the stages' constructors read it.
type parts struct {
	names     CgroupPaths
	probes    ProbeSource
	profiler  Profiler
	ids       WorkloadResolver
	levels    []ident.Kind
	resources ResourceReader
	// staleScrapes is how many later fills may export a resource reading.
	staleScrapes int
	gpus         GPUSource
	gpuCfg       *GPUConfig
	intensity    IntensitySource
}

// deps is what a stage's constructor may use: the loop's configuration and
// sources, what the options asked for, the interval's shared usage and
// credits, and the views of the stages built before it.
type deps struct {
	cfg    Config
	policy model.IdlePolicy
	src    Accounting
	meter  Meter
	res    CgroupPaths
	log    *zap.Logger
	opts   parts
	// use is what each consumer used in the interval (shares.go): the
	// ledger and the probes fill it, the split reads it.
	use *shares
	// credits gives consumers and workloads energy (stage.go).
	credits *credits

	// Views of the stages built so far, found by the interface they
	// implement: a stage takes from here only what it reads.
	consumers consumers      // the ledger
	workloads workloadCredit // the roll-up; nil without workloads
	// health are the sources whose health the snapshot carries beside the
	// meter's, from the options and from stages (healthSource).
	health []any
	// late are the stages that read a source under the steps' deadlines
	// (overrunner).
	late []overrunner
}

// buildStages makes the stages of stageList, handing each the views of
// those before it, and wires the credit watchers.
func buildStages(d *deps) ([]stage, error) {
	var out []stage
	for _, mk := range stageList() {
		s, err := mk(d)
		if err != nil {
			return nil, err
		}
		if s == nil {
			continue
		}
		out = append(out, s)
		if v, ok := s.(consumers); ok {
			d.consumers = v
		}
		if v, ok := s.(workloadCredit); ok {
			d.workloads = v
		}
		if v, ok := s.(healthSource); ok {
			d.health = append(d.health, v.healthSources()...)
		}
		if v, ok := s.(overrunner); ok {
			d.late = append(d.late, v)
		}
	}
	for _, s := range out {
		if w, ok := s.(creditWatcher); ok {
			d.credits.consumers = append(d.credits.consumers, w.creditedConsumer)
			d.credits.workloads = append(d.credits.workloads, w.creditedWorkload)
		}
	}
	return out, nil
}

// healthStage puts the health stage (health.go) in the list: it publishes
// the health of the meter, of the accounting source, of what the options
// added and of the stages that report some (healthSource).
type healthStage struct {
	phases
	h *health
}

func makeHealth(d *deps) (stage, error) {
	sources := []any{d.src, d.opts.probes}
	if d.opts.resources != nil {
		sources = append(sources, d.opts.resources) // cgroupstats reports its health
	}
	sources = append(sources, d.health...)
	h := newHealth(d.meter, d.log, sources...)
	h.late = d.late
	return healthStage{h: h}, nil
}

func (h healthStage) publish(_ *interval, s *snapshot.Snapshot) { h.h.publish(s) }
