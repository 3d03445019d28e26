package stats

import (
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/model"
)

// split is the zones stage's part that divides each zone's energy of the interval among
// the consumers, through pkg/model, by what they used: CPU time, or the
// perf counter the zone's usage metric names.
type split struct {
	policy model.IdlePolicy
	use    *shares
	// metric names each zone's usage metric ("" or "cpu_time": CPU time).
	metric map[string]string
	// counters lists the perf counters the probes read; nil without.
	counters func() []string
	fellBack map[string]bool // zones told they fall back to CPU time
	log      *zap.Logger
	// usageBy may split a zone by something other than CPU time, asked in
	// order; the first non-nil map wins. The perf counters are the first.
	usageBy []func(z *zoneState, cg bool) map[*consumer]float64
	// credits gives each share to its consumer and tells the stages that
	// follow every credited joule (emissions prices it).
	credits *credits
	// vms splits the idle among a host's VMs (vmidle.go); nil unless
	// the policy is even and workloads are resolved.
	vms *vmIdle
	// Scratch maps reused every interval.
	dyn, idle map[*consumer]float64
}

func newSplit(policy model.IdlePolicy, use *shares, metric map[string]string, counters func() []string, cr *credits, log *zap.Logger) *split {
	sp := &split{policy: policy, use: use, metric: metric, counters: counters, credits: cr, log: log, fellBack: map[string]bool{},
		dyn: map[*consumer]float64{}, idle: map[*consumer]float64{}}
	sp.usageBy = append(sp.usageBy, sp.counterUsage)
	return sp
}

// zone splits a zone's energy dE of an interval of length dt with the node
// at utilization util, and adds it to the zone's figures.
func (sp *split) zone(z *zoneState, dE float64, dt time.Duration, util float64) {
	idleJ := z.idleMd.IdleJ(dt, dE, util)
	res := sp.among(z, dE, idleJ, true)
	sp.among(z, dE, idleJ, false)
	z.EnergyJ += dE
	z.IdleJ += res.IdleJ
	z.DynamicJ += res.DynamicJ
	z.UnattributedJ += res.UnattributedJ
	z.PowerW = dE / dt.Seconds()
	if res.Clamped {
		z.IdleClamps++
	}
}

// among runs the model for one zone over one hierarchy (cgroups or
// processes; each sums to the node on its own) and adds the result to the
// consumers' cumulative energy.
func (sp *split) among(z *zoneState, dE, idleJ float64, cg bool) model.Result {
	clear(sp.dyn)
	clear(sp.idle)
	var usage map[*consumer]float64
	for _, by := range sp.usageBy {
		if usage = by(z, cg); usage != nil {
			break
		}
	}
	if usage == nil {
		usage = sp.use.cpu(z.Socket, cg)
	}
	policy := sp.policy
	var vms []vmShare
	if cg && sp.vms != nil {
		if vms = sp.vms.shares(); len(vms) > 0 {
			// The VMs carry the idle, not the busy cgroups: the model
			// splits the dynamic energy alone.
			policy = model.IdleNone
		}
	}
	res := model.Split(model.Interval[*consumer]{EnergyJ: dE, IdleJ: idleJ, Usage: usage, Policy: policy}, sp.dyn, sp.idle)
	for _, v := range vms {
		sp.idle[v.to] += res.IdleJ * v.weight
	}
	// Each consumer's share goes to its series of the zone's labels of
	// this interval, as the zone's own energy does.
	s := snapshot.ZoneSeries{Zone: z.Name, Source: z.Source, Estimated: z.Estimated}
	for w, j := range sp.dyn {
		sp.credits.consumer(w, s, j, 0)
	}
	for w, j := range sp.idle {
		sp.credits.consumer(w, s, 0, j)
	}
	return res
}

// counterUsage is the usage map of a zone split by a perf counter, nil for
// CPU time. Counters are credited per task, not per socket, so a counter
// splits each socket's zone by the node-wide counts.
func (sp *split) counterUsage(z *zoneState, cg bool) map[*consumer]float64 {
	metric := sp.metric[z.Name]
	if metric == "" || metric == "cpu_time" {
		return nil
	}
	read := false
	if sp.counters != nil {
		for _, c := range sp.counters() {
			read = read || c == metric
		}
	}
	if !read {
		if !sp.fellBack[z.Name] {
			sp.fellBack[z.Name] = true
			sp.log.Warn("usage metric not available; splitting by CPU time", zap.String("zone", z.Name), zap.String("metric", metric))
		}
		return nil
	}
	return sp.use.counter(metric, cg)
}

// splitsByCounter reports whether some zone is split by a perf counter
// (stats.usage-metric).
func splitsByCounter(metric map[string]string) bool {
	for _, m := range metric {
		if m != "" && m != "cpu_time" {
			return true
		}
	}
	return false
}
