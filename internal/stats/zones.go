package stats

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/model"
	"github.com/wattrace/wattrace/pkg/reading"
)

// zoneState is one zone's cumulative figures and what the meter stage
// keeps to compute the next interval's energy.
type zoneState struct {
	snapshot.Zone
	prevJ  float64
	seen   bool
	idleMd model.IdleModel
	// left is when the zone left this series for another (zero while it
	// is the zone's series of the moment).
	left time.Time
}

// zones is the stage that reads the meter: each zone's energy of the
// interval, divided among the consumers (div, split.go), and the derived
// zone "other".
type zones struct {
	phases
	meter Meter
	idle  *idleModels
	div   *split
	cpus  int
	log   *zap.Logger
	// reads is the meter's reads under the steps' deadlines (deadline.go).
	reads deadlined[[]reading.ZoneSample]
	// byID is each zone's series of the moment: the one its samples are
	// credited to.
	byID  map[reading.ZoneID]*zoneState
	order []reading.ZoneID
	// series are all of a zone's series, one per source and method it
	// has had: each counts its own energy from zero, and one the zone
	// left stops where it was (a label set's counter never carries
	// another source's joules, so a sum over a zone's series counts each
	// joule once). A zone that returns to a source resumes its series.
	series map[seriesKey]*zoneState
	keys   map[reading.ZoneID][]seriesKey
	// retention is how long the consumers' and workloads' series of a
	// series the zone left stay published (stats.retention).
	retention time.Duration
}

// seriesKey names one (zone, socket, source, method) series.
type seriesKey struct {
	reading.ZoneID
	Source    string
	Estimated bool
}

func keyOf(z *snapshot.Zone) seriesKey {
	return seriesKey{ZoneID: z.ZoneID, Source: z.Source, Estimated: z.Estimated}
}

func makeZones(d *deps) (stage, error) {
	var counters func() []string
	if d.opts.probes != nil {
		counters = d.opts.probes.Counters
	}
	div := newSplit(d.policy, d.use, d.cfg.UsageMetric, counters, d.credits, d.log)
	if d.opts.ids != nil && d.policy == model.IdleEven {
		div.vms = newVMIdle(d.cfg.VMIdleSplit, d.opts.ids, d.consumers, d.log)
	}
	zs := newZones(d.meter, &idleModels{watts: d.cfg.IdleWatts, meter: d.meter}, div, d.cfg.CPUs, d.log)
	zs.retention = d.cfg.Retention
	zs.reads.timeout = d.cfg.readTimeout()
	return zs, nil
}

func newZones(meter Meter, idle *idleModels, div *split, cpus int, log *zap.Logger) *zones {
	return &zones{meter: meter, idle: idle, div: div, cpus: cpus, log: log, byID: map[reading.ZoneID]*zoneState{},
		series: map[seriesKey]*zoneState{}, keys: map[reading.ZoneID][]seriesKey{}}
}

// split reads the meter and divides each zone's energy of the interval,
// the node at the utilization the ledger measured.
func (zs *zones) split(iv *interval) {
	var util float64
	if !iv.baseline {
		util = iv.cpuSeconds / (iv.dt.Seconds() * float64(zs.cpus))
	}
	if a, ok := zs.meter.(Advancer); ok {
		a.Advance(util, iv.dt)
	}
	zs.read(iv.ctx, iv.dt, func(z *zoneState, dE float64) { zs.div.zone(z, dE, iv.dt, util) })
	iv.gone = zs.gone(iv.now)
}

// gone notes when each zone left a series and returns the series of
// consumers and workloads (by zone name, summed over sockets) that every
// socket's zone left longer than the retention ago: like an ended
// workload's, those series leave the snapshots, so a zone that changes
// source or method now and then does not grow every workload's series
// for good. Their joules are kept: a zone that returns to a source later
// resumes its series where it was. Nil when there are none (the usual
// case, a zone that never changed source).
func (zs *zones) gone(now time.Time) map[snapshot.ZoneSeries]bool {
	if len(zs.series) == len(zs.byID) {
		return nil // every series is its zone's current one
	}
	var out map[snapshot.ZoneSeries]bool
	kept := map[snapshot.ZoneSeries]bool{}
	for k, z := range zs.series {
		cs := snapshot.ZoneSeries{Zone: k.Name, Source: k.Source, Estimated: k.Estimated}
		switch {
		case zs.byID[k.ZoneID] == z:
			z.left = time.Time{}
			kept[cs] = true
		case z.left.IsZero():
			z.left = now
			kept[cs] = true
		case now.Sub(z.left) <= zs.retention:
			kept[cs] = true
		default:
			if out == nil {
				out = map[snapshot.ZoneSeries]bool{}
			}
			out[cs] = true
		}
	}
	for cs := range kept {
		delete(out, cs) // another socket's zone still has it
	}
	return out
}

// read reads the meter under the step's deadline and passes each zone's
// energy of the interval to split; dt is 0 on the baseline read. A read
// that fails or overruns the deadline leaves every zone where it was.
func (zs *zones) read(ctx context.Context, dt time.Duration, split func(z *zoneState, dE float64)) {
	zs.reads.source = zs.meter.Name()
	samples, err := zs.reads.read(ctx, zs.meter.Read)
	if err != nil {
		zs.log.Warn("read power meter", zap.String("source", zs.meter.Name()), zap.Error(err))
		return
	}
	var platform, components float64
	havePlatform := false
	for _, s := range samples {
		id := reading.ZoneID{Name: s.Zone, Socket: s.Socket}
		z := zs.zone(id, s.Source, s.Method)
		if !z.seen || dt <= 0 {
			z.prevJ, z.seen = s.Joules, true
			continue
		}
		dE := s.Joules - z.prevJ
		z.prevJ = s.Joules
		if dE < 0 {
			dE = 0
		}
		switch s.Zone {
		case reading.ZonePlatform:
			platform, havePlatform = platform+dE, true
		case reading.ZonePackage, reading.ZoneDRAM, reading.ZoneGPU:
			components += dE
		}
		split(z, dE)
	}
	if havePlatform && components > 0 {
		zs.other(platform, components, dt)
	}
}

// zone returns the state of a zone, creating it on first sight.
func (zs *zones) zone(id reading.ZoneID, source, method string) *zoneState {
	if source == "" {
		source = zs.meter.Name()
	}
	est := zs.estimated(source)
	if method != "" {
		// The meter knows per zone (a host's share: the host may have
		// measured this zone and estimated another).
		est = method == reading.MethodEstimated
	}
	z := zs.byID[id]
	if z != nil {
		if z.Source == source && z.Estimated == est {
			return z
		}
		// A meter that stands in for another (the guest's estimate
		// while the host's share is stale) names itself per sample, and
		// a host's zone may change method: the zone's energy from now on
		// goes to the series of its new labels, the old series stops.
		// The meter's reading stays continuous, so the baseline moves
		// with it.
		k := seriesKey{ZoneID: id, Source: source, Estimated: est}
		n := zs.series[k]
		if n == nil {
			n = &zoneState{Zone: snapshot.Zone{ZoneID: id, Source: source, Estimated: est}}
			zs.addSeries(n)
		}
		n.prevJ, n.seen, n.idleMd = z.prevJ, z.seen, z.idleMd
		// The old series draws nothing from now on: its power gauge
		// must not keep its last interval's watts beside the new one's.
		z.PowerW = 0
		zs.byID[id] = n
		return n
	}
	z = &zoneState{Zone: snapshot.Zone{ZoneID: id, Source: source, Estimated: est}}
	z.idleMd = zs.idle.model(id.Name)
	zs.byID[id] = z
	zs.order = append(zs.order, id)
	zs.addSeries(z)
	return z
}

func (zs *zones) addSeries(z *zoneState) {
	k := keyOf(&z.Zone)
	zs.series[k] = z
	zs.keys[k.ZoneID] = append(zs.keys[k.ZoneID], k)
}

// estimated tells whether a zone's source is a model: a combined meter
// answers per member, so measured RAPL zones next to an estimated platform
// are labelled as what they are.
func (zs *zones) estimated(source string) bool {
	if c, ok := zs.meter.(CombinedMeter); ok {
		if est, ok := c.SourceEstimated(source); ok {
			return est
		}
	}
	return zs.meter.Estimated()
}

// other books what the platform meter saw beyond the CPU packages, DRAM and
// GPUs (fans, disks, NICs, PSU loss) as the node-level zone "other". It is
// part of the platform zone, which the model already splits among
// consumers, so here it stays unattributed: reporting it again per consumer
// would count it twice. A platform reading below its components (the BMC
// and RAPL sample at different moments) books zero rather than negative.
func (zs *zones) other(platform, components float64, dt time.Duration) {
	id := reading.ZoneID{Name: snapshot.ZoneOther, Socket: -1}
	z := zs.byID[id]
	if z == nil {
		z = &zoneState{Zone: snapshot.Zone{ZoneID: id, Source: snapshot.SourceDerived,
			Estimated: zs.byID[reading.ZoneID{Name: reading.ZonePlatform, Socket: -1}].Estimated}}
		zs.byID[id] = z
		zs.order = append(zs.order, id)
		zs.addSeries(z)
	}
	dE := max(platform-components, 0)
	z.EnergyJ += dE
	z.DynamicJ += dE
	z.UnattributedJ += dE
	z.PowerW = dE / dt.Seconds()
}

func (zs *zones) publish(_ *interval, s *snapshot.Snapshot) {
	s.Zones = make([]snapshot.Zone, 0, len(zs.series))
	var ended map[reading.ZoneID]bool
	if e, ok := zs.meter.(ZoneEnder); ok {
		for _, id := range e.EndedZones() {
			if ended == nil {
				ended = map[reading.ZoneID]bool{}
			}
			ended[id] = true
		}
	}
	for _, id := range zs.order {
		// The zone's series of the moment first: readers that want one
		// series per zone (the workloads' labels, the guests' shares)
		// take the first.
		cur := zs.byID[id]
		n := len(s.Zones)
		s.Zones = append(s.Zones, cur.Zone)
		for _, k := range zs.keys[id] {
			if z := zs.series[k]; z != cur {
				s.Zones = append(s.Zones, z.Zone)
			}
		}
		if ended[id] {
			// The meter no longer stands behind any figure of the zone
			// (a guest's estimator does not model it while the host is
			// away): a node series frozen under its old labels would
			// claim the zone still counts.
			for i := n; i < len(s.Zones); i++ {
				s.Zones[i].Ended = true
			}
		}
	}
}

// overruns implements overrunner: the meter's reads cut off at a step's
// deadline.
func (zs *zones) overruns() []overrun { return []overrun{zs.reads.overrun()} }
