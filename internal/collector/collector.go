// Package collector exposes the stats loop's snapshots as Prometheus
// metrics. Each collector lives in its own file and reads the latest
// immutable *stats.Snapshot, so a scrape never waits on the loop and always
// sees one consistent interval.
package collector

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/wattrace/wattrace/internal/snapshot"
	"github.com/wattrace/wattrace/pkg/reading"
	"github.com/wattrace/wattrace/pkg/workload/ident"
)

const namespace = "wattrace"

// SnapshotSource hands out the latest snapshot; *stats.Loop implements it.
// Snapshot returns nil until the first interval has completed.
type SnapshotSource interface {
	Snapshot() *snapshot.Snapshot
}

// ProgramStatsSource reports the kernel's run-time statistics of BPF
// programs; the accounting and the probes loaders implement it.
type ProgramStatsSource interface {
	ProgramStats() ([]reading.ProgramStat, error)
}

// Options are what the exporter knows at start-up that decides which
// collectors run and what they describe. A collector's own settings are
// not here: each registration declares them (withSettings), and Settings
// carries their decoded values.
type Options struct {
	// Enabled turns on the Flag collectors by name (Registered lists them).
	Enabled map[string]bool
	// Settings are the collectors' own settings (collector.<name>.*);
	// a collector missing here runs with its defaults.
	Settings Settings
	// Programs are the BPF programs' statistics sources the bpf-stats
	// collector reports: every loader wattrace holds.
	Programs []ProgramStatsSource
	// MeterHealth is true when the meter reports the health of sources
	// read in the background; only then are the meter families described.
	MeterHealth bool
	// Levels are the workload levels to export (container, pod, vm, job,
	// unit); none disables the workloads collector.
	Levels []ident.Kind
	// IdleAttributed is true when an idle policy other than "none" hands
	// idle energy to workloads. Only then are workload series with
	// mode="idle" exported: under "none" they would all be 0.
	IdleAttributed bool
	// Emissions is true when the stats loop prices energy in grams of
	// CO2e (the emissions collector; provider rejections join the
	// source families).
	Emissions bool
	Log       *zap.Logger
}

// errNoSnapshot is returned by collectors before the first interval.
var errNoSnapshot = errors.New("no snapshot yet: the first accounting interval has not completed")

type namedCollector struct {
	name string
	c    subCollector
}

// Exporter is the prometheus.Collector that main registers. It runs the
// enabled collectors and adds per-collector scrape metrics and the
// exporter's own metrics.
type Exporter struct {
	src        SnapshotSource
	collectors []namedCollector
	self       *selfCollector
	log        *zap.Logger

	scrapeSuccess  *desc
	scrapeDuration *desc

	// text is AppendText's, kept from one rendering to the next.
	text struct {
		sync.Mutex
		t *textFamilies
	}
}

// New builds the exporter from the enabled collectors.
func New(src SnapshotSource, o Options) (*Exporter, error) {
	if src == nil {
		return nil, errors.New("collector: nil snapshot source")
	}
	if err := o.Settings.Check(); err != nil {
		return nil, fmt.Errorf("collector: %w", err)
	}
	if o.Enabled[NameBPFStats] && len(o.Programs) == 0 {
		return nil, errors.New("collector: bpf-stats enabled without a program statistics source")
	}
	for name := range o.Enabled {
		if r, ok := registrations[name]; !ok || !r.Flag {
			return nil, fmt.Errorf("collector: no collector %q to enable", name)
		}
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	e := &Exporter{
		src:  src,
		self: newSelfCollector(),
		log:  log,
		scrapeSuccess: newDesc("scrape", "collector_success",
			"Whether a collector succeeded (1) or failed or had no data yet (0) in this scrape.", "collector"),
		scrapeDuration: newDesc("scrape", "collector_duration_seconds",
			"How long a collector took in this scrape.", "collector"),
	}
	// Registered's fixed order keeps logs and scrape-metric output stable.
	for _, r := range Registered() {
		if r.enabled(o) {
			e.collectors = append(e.collectors, namedCollector{r.Name, r.new(o)})
		}
	}
	return e, nil
}

// Describe implements prometheus.Collector. Every family is described, so
// the registry checks each metric against its descriptor.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	describeAll(ch, e.scrapeSuccess, e.scrapeDuration)
	e.self.describe(ch)
	for _, c := range e.collectors {
		c.c.describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.collect(&sink{ch: ch})
}

// AppendText renders what Collect gives, of the latest snapshot, in the
// Prometheus text format, byte for byte as the registry's Gather and
// expfmt's text encoder would, appending to buf. It returns the grown
// buffer and where each family lies in it, sorted by name, so a caller can
// merge other registries' families in order. The errors are those Gather
// would report (a sample dropped); the rest is rendered.
func (e *Exporter) AppendText(buf []byte) ([]byte, []TextFamily, []error) {
	e.text.Lock()
	defer e.text.Unlock()
	if e.text.t == nil {
		e.text.t = newTextFamilies()
	}
	t := e.text.t
	t.reset()
	e.collect(&sink{text: t})
	buf, fams := t.appendTo(buf)
	errs := t.errs
	t.reset()
	return buf, fams, errs
}

func (e *Exporter) collect(out *sink) {
	// One snapshot for the whole scrape, so node and workload series agree.
	snap := e.src.Snapshot()
	e.self.update(out, snap)
	for _, c := range e.collectors {
		start := time.Now()
		err := c.c.update(out, snap)
		success := 1.0
		if err != nil {
			success = 0
			if errors.Is(err, errNoSnapshot) {
				e.log.Debug("collector has no data yet", zap.String("collector", c.name))
			} else {
				e.log.Error("collector failed", zap.String("collector", c.name), zap.Error(err))
			}
		}
		out.add(e.scrapeDuration, prometheus.GaugeValue, time.Since(start).Seconds(), c.name)
		out.add(e.scrapeSuccess, prometheus.GaugeValue, success, c.name)
	}
}

// metric builds a const metric. Label values come from the kernel (comm,
// cgroup paths) and may hold any bytes; they are made valid UTF-8 so one odd
// process name cannot fail the scrape, and any remaining error is reported
// through the registry instead of panicking.
func metric(desc *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) prometheus.Metric {
	for i, l := range labels {
		labels[i] = strings.ToValidUTF8(l, "\uFFFD")
	}
	m, err := prometheus.NewConstMetric(desc, t, v, labels...)
	if err != nil {
		return prometheus.NewInvalidMetric(desc, err)
	}
	return m
}

// Label values shared by node and workload series.
const (
	methodMeasured  = "measured"
	methodEstimated = "estimated"
	modeIdle        = "idle"
	modeDynamic     = "dynamic"
	// socketNode is the socket label of node-wide zones (ZoneID.Socket -1,
	// e.g. psys or the estimator). An explicit value rather than "" because
	// PromQL treats an empty label as absent, which makes such series easy
	// to mistake for unlabelled ones.
	socketNode = "node"
)

func method(estimated bool) string {
	if estimated {
		return methodEstimated
	}
	return methodMeasured
}

// zoneLabels maps a zone name to the source and method labels of the node
// zone it belongs to. Workload energy is split from that zone, so it carries
// the same provenance.
type zoneLabels map[string][2]string

func newZoneLabels(zones []snapshot.Zone) zoneLabels {
	m := make(zoneLabels, len(zones))
	for _, z := range zones {
		if _, ok := m[z.Name]; !ok {
			m[z.Name] = [2]string{z.Source, method(z.Estimated)}
		}
	}
	return m
}

func (m zoneLabels) get(zone string) (source, meth string) {
	if l, ok := m[zone]; ok {
		return l[0], l[1]
	}
	// A workload zone without a node zone should not happen; claim nothing.
	return "unknown", methodEstimated
}

// label returns e with every series labelled: a series whose source is
// not known (Source empty) takes the zone's labels of the moment, and is
// merged into a series of the same labels, so that no label set is sent
// twice. e itself when every series is labelled (the loop labels all it
// credits), else a copy.
func (m zoneLabels) label(e snapshot.Energy) snapshot.Energy {
	i := 0
	for ; i < len(e) && e[i].Source != ""; i++ {
	}
	if i == len(e) {
		return e
	}
	out := make(snapshot.Energy, 0, len(e))
	for _, z := range e {
		s := z.Series()
		if s.Source == "" {
			src, meth := m.get(s.Zone)
			s.Source, s.Estimated = src, meth == methodEstimated
		}
		out = out.Add(s, z.DynamicJ, z.IdleJ)
	}
	return out
}
